"""``perfkit launch --hosts``: a user's command on their own hosts, over SSH, as one run.

Each host runs one part of the run the way a host started by hand does (``perfkit launch --host NAME
--run-id ID``: its own launcher, placement, sampler, heartbeats, hang and death naming, ``agent.py``), started
through the user's ``ssh`` with only the variables perfkit sets and those the user named. This process keeps
each session's stdin beating (a host loses its workers within 10 s of losing this process), shows every
worker's output prefixed with its index and host, stops every host when one fails or on Ctrl-C, and brings each
host's part back over the same SSH (unless the host writes into this host's results directory already: a
shared file system), so that ``perfkit analyze`` merges the parts as one run.
"""

from __future__ import annotations

import json
import logging
import queue
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit._atomic import read_object
from perfkit._started import begin_run
from perfkit.cluster import ClusterSpec, HostSpec
from perfkit.config import sanitize_id
from perfkit.errors import RunFailed, RunInterrupted
from perfkit.events import NullObserver, Observer
from perfkit.results import RunDir, new_run_id, write_run_file
from perfkit.trainer.remote.agent import STOP
from perfkit.trainer.remote.hosts import Remote, marker, with_cores
from perfkit.trainer.remote.mirror import Mirror
from perfkit.trainer.remote.session import Events, Session, beat, drain, open_session, reader, ready
from perfkit.trainer.remote.ssh import ALIVE_COUNT, ALIVE_S, SSH_FAILED, Target, remote_command

log = logging.getLogger(__name__)

STOP_WAIT_S = 30.0  # a host told to stop saves and exits in ~8 s (agent.py); then its ssh is closed
PEER_VERDICT_S = 15.0  # every host sees a stall within a poll or two of the others (the same hang limit)
FETCH_S = 600.0


@dataclass(frozen=True)
class AgentArgs:
    """What each host's ``perfkit launch`` is given besides its host name (the flags it shares with this one)."""

    argv: tuple[str, ...]  # the user's command
    flags: tuple[str, ...]  # --mode, --connect-timeout, --hang-timeout, ... as the user gave them
    multi: bool  # a cluster (multi or ps), not one process
    mode: str = "multi"


def launch_hosts(cluster: ClusterSpec, args: AgentArgs, remote: Remote, results_dir: Path,
                 observer: Observer | None = None, run_id: str | None = None, label: str | None = None) -> Path:
    """Run ``args`` on every host of ``cluster`` (one host, no TF_CONFIG, when not ``args.multi``); the first
    host's part, beside the others' in ``results_dir``."""
    observer = observer or NullObserver()
    origin = begin_run()  # every host's part counts its start-up from this command's start
    results_dir = Path(results_dir)
    rid = sanitize_id(run_id) if run_id else new_run_id(args.mode if args.multi else "single", label)
    names = {h.name: f"{rid}--{sanitize_id(h.name)}" if args.multi else rid for h in cluster.hosts}
    for name in names.values():
        RunDir.path_for(results_dir, name)  # a part brought back must not replace a run already here
    observer.phase(f"opening {len(cluster.hosts)} SSH session(s)")
    mark = marker(results_dir)
    sessions = [_open(h, names[h.name], cluster, args, remote, results_dir, rid, origin, mark.name)
                for h in cluster.hosts]
    events: Events = queue.Queue()
    readers = [reader(s, s.proc.stdout, "out", events) for s in sessions] + \
              [reader(s, s.proc.stderr, "err", events) for s in sessions]
    beating = threading.Event()
    threading.Thread(target=beat, args=(sessions, beating), name="perfkit-ssh-beat", daemon=True).start()
    interrupted, mirror = False, None
    try:
        hosts = ready(sessions, events, observer, remote, args.argv[0])
        placed = with_cores(cluster, hosts)
        mirror = Mirror(results_dir, rid, placed, args.mode if args.multi else "single")
        if mirror.path is not None:
            observer.run_opened(mirror.path)  # --live follows the live copy
        for s in sessions:
            s.live = mirror.write
        _go(sessions, placed if args.multi else None, observer)
        _wait(sessions, events, observer)
    except KeyboardInterrupt:
        if any(s.host is None for s in sessions):  # before the hosts answered: nothing started anywhere
            raise RunInterrupted(f"run {rid} interrupted before any host started it") from None
        interrupted = True
        _stop(sessions, events, observer)
    finally:
        mark.unlink(missing_ok=True)
        for t in readers:
            t.join(timeout=5)
        drain(events, observer)
        beating.set()
        if mirror is not None:
            mirror.close()
    fetched = _fetch_all(sessions, results_dir, observer)
    return _outcome(sessions, fetched, results_dir, rid, interrupted)


def _open(h: HostSpec, dir_name: str, cluster: ClusterSpec, args: AgentArgs, remote: Remote, results_dir: Path,
          rid: str, origin: int, mark: str) -> Session:
    where = ["--host", h.name] if args.multi else []
    rdir = remote.results_for(h.name, results_dir)
    argv = [remote.perfkit, "launch", "--agent", *args.flags, *where, "--run-id", rid, "--results-dir", rdir,
            "--", *args.argv]
    # The variables the user named travel in the header, not on the command line (no value shows in ps there).
    header = {"run_id": rid, "command_started_wall_ns": origin, "marker": mark, "env": dict(remote.env),
              "ports": [t.port for t in cluster.tasks if t.host == h.name]}
    return open_session(Target(str(h.ssh), h.name), rdir, dir_name, argv, remote, header)


def _go(sessions: list[Session], cluster: ClusterSpec | None, observer: Observer) -> None:
    """Every host answered and can run: each starts its part (its workers, with the cluster's cores)."""
    for s in sessions:
        h = s.host
        assert h is not None
        observer.phase(f"{s.name}: {h.cores:g} cores, perfkit {h.versions.get('perfkit')}, TensorFlow "
                       f"{h.versions.get('tensorflow')}, records in {h.results_dir}"
                       + (" (shared with this host)" if h.shared else ""))
        s.send(json.dumps({"go": {"cluster": cluster.to_dict() if cluster is not None else None}}))


def _wait(sessions: list[Session], events: Events, observer: Observer) -> None:
    """Until every host's part ended; the first to end badly stops the others, unless its workers only waited
    for (or died waiting for) a worker on another host: that host, which saw the same stall, gets
    ``PEER_VERDICT_S`` to name its cause."""
    grace: float | None = None
    while True:
        drain(events, observer, timeout=0.2)
        now = time.monotonic()
        for s in sessions:
            if s.ended_at is None and s.proc.poll() is not None:
                s.ended_at = now
        # (half a second after its exit, its last lines, how it ended among them, have been read)
        bad = [s for s in sessions if s.proc.returncode not in (None, 0) and now - (s.ended_at or now) >= 0.5]
        if all(s.ended_at is not None for s in sessions):
            return
        if bad and all(s.waits_elsewhere() for s in bad):
            grace = grace or now + PEER_VERDICT_S
        if bad and (grace is None or now > grace or not all(s.waits_elsewhere() for s in bad)):
            _stop(sessions, events, observer)
            return


def _stop(sessions: list[Session], events: Events, observer: Observer) -> None:
    """Every host still running stops its workers as on Ctrl-C (they save); a session that does not end in
    ``STOP_WAIT_S`` is closed, and its host's watchdog stops what is left."""
    running = [s for s in sessions if s.proc.poll() is None]
    for s in running:
        observer.phase(f"{s.name}: stopping its workers")
        s.send(STOP)
    deadline = time.monotonic() + STOP_WAIT_S
    while any(s.proc.poll() is None for s in running) and time.monotonic() < deadline:
        try:
            drain(events, observer, timeout=0.2)
        except KeyboardInterrupt:  # a second Ctrl-C: the hosts are already stopping; wait for them
            continue
    for s in running:
        if s.proc.poll() is None:
            s.proc.kill()  # end of file on the host: its watchdog stops the workers
            s.proc.wait()
        s.ended_at = s.ended_at or time.monotonic()


def _fetch_all(sessions: list[Session], results_dir: Path, observer: Observer) -> dict[str, str | None]:
    """Each host's part brought back (None), or why it could not be."""
    out: dict[str, str | None] = {}
    for s in sessions:
        if s.shared:
            out[s.name] = None if (results_dir / s.dir_name / "run.json").is_file() else "it wrote no records"
            continue
        observer.phase(f"{s.name}: bringing its records back")
        started = time.monotonic()
        out[s.name] = fetch(s, results_dir)
        if out[s.name] is None:
            _record_transfer(results_dir / s.dir_name, s, time.monotonic() - started)
    return out


def _record_transfer(part: Path, s: Session, seconds: float) -> None:
    """run.json of a part brought back says from where, and what bringing it took."""
    size = sum(f.stat().st_size for f in part.rglob("*") if f.is_file())
    try:
        meta = json.loads((part / "run.json").read_text())
        meta["transfer"] = {"from": s.target.ssh, "path": f"{s.results_dir}/{s.dir_name}",
                            "seconds": round(seconds, 3), "bytes": size}
        write_run_file(part, meta)
    except (OSError, ValueError) as exc:  # the records are here; only their account of the copy is missing
        log.warning("%s: could not record the transfer: %s", part, exc)


def fetch(s: Session, results_dir: Path) -> str | None:
    """``tar`` of the part on its host, unpacked beside the others here (into a temporary folder first,
    renamed when whole; members that would leave it are refused: ``tarfile``'s data filter)."""
    remote = remote_command(["tar", "-C", s.results_dir, "-cf", "-", s.dir_name])
    tmp = Path(tempfile.mkdtemp(prefix=f".{s.dir_name}.fetching-", dir=results_dir))
    try:
        proc = subprocess.Popen(s.target.argv(remote), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdout is not None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                _unpack(tar, tmp)
        except tarfile.TarError as exc:
            err = proc.stderr.read().decode("utf-8", "replace").strip() if proc.stderr else ""
            proc.kill()
            return (err.splitlines() or [str(exc)])[-1]
        finally:
            proc.wait(timeout=FETCH_S)
        if proc.returncode != 0 or not (tmp / s.dir_name / "run.json").is_file():
            err = proc.stderr.read().decode("utf-8", "replace").strip() if proc.stderr else ""
            return (err.splitlines() or [f"tar exited {proc.returncode}"])[-1]
        dest = results_dir / s.dir_name
        if dest.exists():
            shutil.rmtree(dest)
        (tmp / s.dir_name).rename(dest)
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpack(tar: tarfile.TarFile, into: Path) -> None:
    """Every member under ``into``, as files and folders only: tarfile's "data" filter where this Python has
    it (3.10.12+, 3.11.4+), else the same rule checked here (a host must not write outside the folder)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(into, filter="data")
        return
    root = into.resolve()
    for member in tar:
        target = (into / member.name).resolve()
        if not (member.isfile() or member.isdir()) or root not in (target, *target.parents):
            raise tarfile.TarError(f"refused {member.name!r}: not a file or folder inside the part")
        tar.extract(member, into)


def _outcome(sessions: list[Session], fetched: dict[str, str | None], results_dir: Path, rid: str,
             interrupted: bool) -> Path:
    lead = results_dir / sessions[0].dir_name
    missing = [f"{s.name} ({why}; they stay in {s.results_dir}/{s.dir_name} there)"
               for s in sessions if (why := fetched.get(s.name))]
    tail = f"; records not brought back from {', '.join(missing)}" if missing else ""
    if interrupted:
        raise RunInterrupted(f"run {rid} interrupted on every host; what was recorded is in {results_dir}{tail}")
    bad = [s for s in sessions if s.proc.returncode != 0]
    if not bad:
        if missing:
            raise RunFailed(f"run {rid} completed, but{tail[1:]}")
        return lead
    cause = min(bad, key=lambda s: (_rank(s, results_dir), s.ended_at or 0.0))
    raise RunFailed(f"run {rid} failed on host {cause.name}: {_why(cause, results_dir)}{tail}")


def _rank(s: Session, results_dir: Path) -> int:
    """Which failed host is the cause: a lost link or a worker's own death before one stopped by the others."""
    meta = _meta(s, results_dir)
    if s.proc.returncode == SSH_FAILED:
        return 0
    if meta.get("status") == "failed":
        details = meta.get("failure") or {}
        return 1 if details.get("signal") or details.get("hung") else 3 if s.waits_elsewhere() else 2
    return 4


def _why(s: Session, results_dir: Path) -> str:
    meta = _meta(s, results_dir)
    if meta.get("status") in ("failed", "interrupted") and meta.get("error"):
        return str(meta["error"])
    last = next((ln for ln in reversed(s.stderr) if ln.strip()), "")
    if s.proc.returncode == SSH_FAILED:
        return (f"the SSH connection to it dropped ({last or 'ssh exited 255'}): the host went silent for "
                f"{ALIVE_S * ALIVE_COUNT} s or its link failed; its own watchdog stops its workers")
    return last.removeprefix("perfkit: ") or f"perfkit there exited {s.proc.returncode}"


def _meta(s: Session, results_dir: Path) -> dict[str, Any]:
    return read_object(results_dir / s.dir_name / "run.json")

