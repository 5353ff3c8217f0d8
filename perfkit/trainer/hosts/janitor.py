"""A run's janitor: removes what the run made on this machine (network namespaces, cgroups, temporary
folders) once the run's process is gone, however it went; SIGKILL included, where no handler runs.

``Janitor.start()`` launches ``python -m perfkit.trainer.hosts.janitor`` in its own session (a terminal's hangup
or a signal to perfkit's process group does not reach it) and ignoring SIGINT/SIGTERM/SIGHUP. The launcher
tells it each thing as soon as it is made, one JSON line each on a pipe. When the pipe closes (the launcher
finished, or died) the janitor kills whatever still runs inside those namespaces and cgroups, removes them,
and exits. On a normal finish the launcher has already removed everything and the janitor finds nothing.

It also finishes a run its launcher could not (``finish_run``): told the run directory and each worker's
pid, when the pipe closes while run.json still says ``running`` (the launcher was killed by SIGKILL or
died of a bug), it waits for the workers to stop (the kernel sent each the parent-death signal: SIGINT,
which lets a worker save the steps of its current epoch; ``worker/guard.py``), SIGKILLs any still running
after ``STOP_GRACE_S``, then marks run.json ``interrupted`` with the workers' last states and what was
lost, so that ``perfkit analyze`` reads what the run recorded.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from perfkit._atomic import read_object

if TYPE_CHECKING:
    from perfkit.runmeta import WorkerRecord

log = logging.getLogger(__name__)

# glob: temporary folders whose names are not known ahead; run: a run directory; worker: a worker's pid
KINDS = ("netns", "cgroup", "dir", "glob", "run", "worker")
EMPTY_WAIT_S = 10.0
STOP_GRACE_S = 5.0  # for a worker to save its steps after its launcher died, before SIGKILL


class Janitor:
    """The launcher's side: start the helper, register things, close (then wait for it to finish)."""

    def __init__(self, grace_s: float = STOP_GRACE_S) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self.items: list[dict[str, Any]] = []
        self.grace_s = grace_s

    def start(self) -> None:
        # "--for PID", last, names the launcher it serves (in ps, guard.has_janitor, tests that look for one
        # run's janitor)
        grace = ["--grace", repr(self.grace_s)] if self.grace_s != STOP_GRACE_S else []
        argv = [sys.executable, "-m", "perfkit.trainer.hosts.janitor", *grace, "--for", str(os.getpid())]
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)

    def register(self, kind: str, value: str | Path, **extra: Any) -> None:
        item = {"kind": kind, "value": str(value), **extra}
        self.items.append(item)
        if self._proc is not None and self._proc.stdin is not None:
            try:
                self._proc.stdin.write((json.dumps(item) + "\n").encode())
                self._proc.stdin.flush()
            except OSError as exc:  # it died: the launcher still cleans up on its own normal paths
                log.warning("the run's janitor is gone (%s); %s %s is removed only by this process", exc, kind, value)

    def close(self, timeout: float = 30.0) -> None:
        """Let it check (and remove) everything registered, and wait for it; never longer than ``timeout``."""
        if self._proc is None:
            return
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.error("the run's janitor (pid %d) did not finish within %.0f s", self._proc.pid, timeout)
        self._proc = None


def remove(items: list[dict[str, str]]) -> list[str]:
    """Kill what runs inside each registered namespace and cgroup, then remove them all; what could not be."""
    netns = [i["value"] for i in items if i.get("kind") == "netns"]
    groups = [Path(i["value"]) for i in items if i.get("kind") == "cgroup"]
    for name in netns:
        _kill(_netns_pids(name))
    for group in groups:
        _kill(_cgroup_pids(group))
    left = []
    for group in groups:
        deadline = time.monotonic() + EMPTY_WAIT_S
        while group.exists() and _cgroup_pids(group) and time.monotonic() < deadline:
            time.sleep(0.1)
        try:
            group.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            left.append(f"cgroup {group}: {exc.strerror or exc}")
    for name in reversed(netns):  # host namespaces before the hub their links lead to
        left += delete_netns(name)
    for item in items:
        if item.get("kind") == "dir":
            shutil.rmtree(item["value"], ignore_errors=True)
        elif item.get("kind") == "glob":
            pattern = Path(item["value"])
            for path in pattern.parent.glob(pattern.name):
                shutil.rmtree(path, ignore_errors=True)
    return left


def delete_netns(name: str) -> list[str]:
    if not Path("/run/netns", name).exists():
        return []
    done = subprocess.run(["ip", "netns", "delete", name], capture_output=True, text=True, timeout=30)
    return [f"netns {name}: {done.stderr.strip()}"] if done.returncode else []


def _netns_pids(name: str) -> list[int]:
    if not Path("/run/netns", name).exists():
        return []
    done = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=30)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def _cgroup_pids(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill(pids: list[int]) -> None:
    for pid in pids:
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


# -- a run its launcher did not finish -------------------------------------------------------------------
SAVED_STATES = ("interrupted", "finishing", "done", "failed")  # its tables saved (part.close_part, fitpart.finishing)


def finish_run(items: list[dict[str, Any]], launcher: int | None, grace: float = STOP_GRACE_S) -> list[Path]:
    """Stop the registered workers still running (their launcher is gone), then mark each registered run
    still ``running`` as ``interrupted``; the runs so marked."""
    workers = {int(i["index"]): i for i in items if i.get("kind") == "worker" and isinstance(i.get("index"), int)}
    stop_workers([(int(i["value"]), i.get("started")) for i in workers.values()], grace)
    done = []
    for run in [Path(i["value"]) for i in items if i.get("kind") == "run"]:
        if mark_interrupted(run, launcher, sorted(workers)):
            done.append(run)
    return done


def stop_workers(procs: list[tuple[int, float | None]], grace: float) -> None:
    """Wait up to ``grace`` for these processes to end (their parent-death signal asked them to), then
    SIGKILL the rest. ``started``: the process's start time, so a reused pid is never touched."""
    live = [p for p in (_process(pid, started) for pid, started in procs) if p is not None]
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.1)
        live = [p for p in live if _running(p)]
    _kill([p.pid for p in live])


def _process(pid: int, started: float | None) -> Any:
    import psutil

    try:
        proc = psutil.Process(pid)
        return proc if _running(proc) and (started is None or abs(proc.create_time() - started) < 0.05) else None
    except psutil.Error:
        return None


def _running(proc: Any) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE  # a zombie has saved all it will
    except psutil.Error:
        return False


def mark_interrupted(run: Path, launcher: int | None, indices: list[int]) -> bool:
    """run.json ``interrupted`` if it still says ``running``, with each worker's last state (its status.json)
    and what was lost; False when the run had been finished (or has no readable run.json)."""
    from perfkit.errors import ResultsError
    from perfkit.profiler.tracewindow import finish_traces
    from perfkit.results import RUN_FILE, RunDir, release_reserve
    from perfkit.runmeta import RunMeta, fit_plan

    meta = read_object(run / RUN_FILE)
    if meta.get("status") != "running":
        return False
    try:
        typed = RunMeta.parse(meta, str(run / RUN_FILE))
    except ResultsError:  # not a run record this perfkit can write back
        return False
    cluster = meta.get("cluster") or {}
    indices = sorted({*indices, *(int(i) for i in cluster.get("local_workers") or [] if isinstance(i, int))})
    states = {i: _status(run, i) for i in indices}
    records = [_worker_record(cluster, i, st) for i, st in states.items()]
    plan = fit_plan(records)
    who = f"perfkit's launcher (pid {launcher})" if launcher else "perfkit's launcher"
    release_reserve(run)
    record = RunDir(run, typed)
    record.finish("interrupted", f"{who} ended without finishing the run", workers=records,
                  lost=lost(states),
                  failure={"launcher_pid": launcher, "finished_by": "the run's janitor"},
                  **({"plan": plan} if plan else {}))
    captures = {str(i): st["profile"] for i, st in states.items() if isinstance(st.get("profile"), dict)}
    finish_traces(record, str((meta.get("config") or {}).get("profile_steps") or "off"), captures)
    return True


def lost(states: dict[int, dict[str, Any]]) -> list[str]:
    """What a run whose launcher died did not keep, in words."""
    out = ["cpu.parquet, system.parquet: the CPU and memory samples were in the launcher's memory"]
    for i, st in sorted(states.items()):
        if st and st.get("state") not in SAVED_STATES:  # no status.json: a command that records nothing
            saved = int(st.get("epochs_done") or 0)
            out.append(f"worker {i}: its steps after epoch {saved} (it ended '{st.get('state')}', without "
                       f"saving them)")
    return out


def _status(run: Path, index: int) -> dict[str, Any]:
    return read_object(run / "workers" / str(index) / "status.json")


def _worker_record(cluster: dict[str, Any], index: int, status: dict[str, Any]) -> WorkerRecord:
    """run.json's ``workers[]`` entry, as the launcher would have written it, from what is on disk."""
    from perfkit.runmeta import WorkerRecord

    task = next((t for t in cluster.get("tasks") or cluster.get("workers") or []
                 if isinstance(t, dict) and t.get("index") == index), {})
    pid = status.get("pid")
    return WorkerRecord.reported(index, status, host=task.get("host") or status.get("host"), role=task.get("role"),
                                 endpoint=task.get("endpoint"), pid=pid if isinstance(pid, int) else None,
                                 task=task.get("task"), epochs_done=status.get("epochs_done"))


def _read_items(stream: IO[bytes]) -> list[dict[str, Any]]:
    items = []
    for line in stream:  # until the launcher closes the pipe, or dies
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and item.get("kind") in KINDS and isinstance(item.get("value"), str):
            items.append(item)
    return items


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    grace = float(args[1]) if len(args) == 4 and args[0] == "--grace" else STOP_GRACE_S
    launcher = int(args[-1]) if len(args) >= 2 and args[-2] == "--for" and args[-1].isdigit() else None
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    items = _read_items(sys.stdin.buffer)
    left = []
    try:
        finish_run(items, launcher, grace)
    except Exception as exc:  # noqa: BLE001 - the removal below must happen whatever went wrong here
        left.append(f"the run's record: {type(exc).__name__}: {exc}")
    left += remove(items)
    for line in left:
        print(f"perfkit janitor: could not finish or remove {line}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
