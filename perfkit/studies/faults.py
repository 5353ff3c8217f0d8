"""``perfkit check faults``: faults a real cluster has, injected into real runs on this machine, and whether
perfkit names each one right, how fast, and keeps what the failed run recorded.

Each trial starts a 2-worker run, waits until worker 1 trains in epoch ``at_epoch`` at step ``at_step`` or
later (its heartbeat says so), injects the fault and times from the injection to perfkit's exit:
- ``stop``: ``SIGSTOP`` of worker 1 (``perfkit run --workers 2``);
- ``sleep`` / ``lock``: worker 1 of an unmodified script stuck in its own Keras callback, in ``time.sleep`` or
  on a lock it already holds (``perfkit launch --workers 2 -- python .../worker/stuck.py``);
- ``link``: the second emulated host's ``eth0`` set down in its network namespace (root and ``ip``);
- ``disk``: the results directory, a tmpfs of 8 MiB mounted for the trial (root), filled to the last byte;
- ``kill``: ``SIGKILL`` of perfkit's own launcher, timed to run.json's last word.
Named right: the run's failure names worker 1 first, as the cause (``failure.hung``), or the two hosts as
having lost each other (``failure.lost_links``); the full disk's path and reason in perfkit's one error line;
the killed launcher's run ``interrupted``, saying so. Kept: the run says how it ended and every worker's
``steps.parquet`` reads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit._atomic import read_object

FAULTS = ("stop", "sleep", "lock", "link", "disk", "kill")
NEEDS_ROOT = ("link", "disk")
VICTIM = 1
DISK_SIZE = "8m"  # room for the run's start; the trial fills the rest
STUCK_SCRIPT = Path(__file__).resolve().parents[1] / "trainer" / "worker" / "stuck.py"
# The link fault's cluster: two emulated hosts of one worker each, the second with half the CPU of the first
# (examples/unequal-pair.toml; scaled to this machine when emulated).
PAIR_TOML = """[[hosts]]
name = "fast"
address = "127.0.0.1"
cores = 2
workers = 1
base_port = 20000

[[hosts]]
name = "slow"
address = "127.0.0.2"
cores = 1
workers = 1
base_port = 20000
"""


@dataclass(frozen=True)
class FaultSpec:
    """What each trial trains and when its fault goes in."""

    preset: str = "tiny"
    epochs: int = 30  # tiny epochs of 8 steps: the run is still going when the fault goes in
    train_players: int | None = None
    test_players: int | None = None
    at_epoch: int = 1  # 0-based: worker 1 trains in this epoch ...
    at_step: int = 2  # ... at this step or later
    hang_timeout: str = "auto"
    timeout_s: float = 600.0  # one trial

    def sizes(self) -> list[str]:
        pairs = (("--train-players", self.train_players), ("--test-players", self.test_players))
        return [text for flag, value in pairs if value is not None for text in (flag, str(value))]


@dataclass(frozen=True)
class Trial:
    fault: str
    injected: bool
    detect_s: float | None  # injection to perfkit's exit
    exit_code: int | None
    named: bool
    status: str | None
    message: str
    steps_kept: int | None  # step rows readable from every worker's steps.parquet; None: one did not read


def chosen_faults(text: str | None) -> list[str]:
    """``--faults``' list, checked; none given: every fault this machine can inject (link and disk need root,
    and link iproute2's ``ip``)."""
    import shutil

    from perfkit.errors import UsageError

    def missing(fault: str) -> str | None:
        if fault in NEEDS_ROOT and os.geteuid() != 0:
            return "root (a network namespace, a tmpfs mount)"
        return "iproute2's `ip`" if fault == "link" and shutil.which("ip") is None else None

    if text is None:
        return [f for f in FAULTS if missing(f) is None]
    names = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in names if f not in FAULTS]
    if bad or not names:
        raise UsageError(f"--faults: {', '.join(bad) or 'none given'}; choose from {', '.join(FAULTS)}")
    for fault in names:
        if (need := missing(fault)) is not None:
            raise UsageError(f"--faults: {fault} needs {need}; run where it is, or leave {fault} out")
    return names


def command(fault: str, run_dir: Path, spec: FaultSpec) -> list[str]:
    perfkit = [sys.executable, "-m", "perfkit"]
    common = ["--results-dir", str(run_dir.parent), "--run-id", run_dir.name, "--quiet", "--no-profile",
              "--hang-timeout", spec.hang_timeout]
    if fault in ("sleep", "lock"):
        return [*perfkit, "launch", "--workers", "2", *common, "--", sys.executable, str(STUCK_SCRIPT),
                "--how", fault, "--stuck-worker", str(VICTIM), "--at-batch", str(spec.at_step)]
    where = ["--cluster", str(_pair_file(run_dir.parent)), "--emulate"] if fault == "link" else ["--workers", "2"]
    return [*perfkit, "run", "--mode", "multi", *where, "--preset", spec.preset, "--epochs", str(spec.epochs),
            *spec.sizes(), *common]


def _pair_file(root: Path) -> Path:
    path = root / "fault-pair.toml"
    path.write_text(PAIR_TOML)
    return path


def _training(run_dir: Path, fault: str, spec: FaultSpec) -> bool:
    """Worker 1 is where the fault goes in: training, past the step it is injected at."""
    beat = read_object(run_dir / "workers" / str(VICTIM) / "heartbeat.json")
    if not beat:
        return False
    if fault in ("sleep", "lock"):  # the script gets stuck by itself at its step
        return True
    if fault == "disk":  # a saved epoch first, so that something recorded is there to keep
        return int(read_object(run_dir / "workers" / str(VICTIM) / "status.json").get("epochs_done") or 0) >= 1
    step = beat.get("step")
    return int(beat.get("epoch") or 0) >= spec.at_epoch and step is not None and int(step) >= spec.at_step


def inject(fault: str, run_dir: Path, proc: subprocess.Popen[bytes]) -> None:
    if fault == "kill":
        os.kill(proc.pid, signal.SIGKILL)  # the perfkit command itself is the launcher
    elif fault == "disk":
        fill(run_dir.parent)
    elif fault == "stop":
        os.kill(int(read_object(run_dir / "workers" / str(VICTIM) / "status.json")["pid"]), signal.SIGSTOP)
    elif fault == "link":
        meta = read_object(run_dir / "run.json")
        host = meta["cluster"]["hosts"][VICTIM]["name"]
        subprocess.run(["ip", "-n", meta["network"]["namespaces"][host], "link", "set", "eth0", "down"],
                       check=True, timeout=30)


def trial(fault: str, root: Path, index: int, spec: FaultSpec) -> Trial:
    """One trial of ``fault`` under ``root`` (its run: ``root/<fault>-<index>``)."""
    root.mkdir(parents=True, exist_ok=True)
    results = _mount_disk(root / f"disk-{index}", root) if fault == "disk" else root
    try:
        return _trial(fault, results / f"{fault}-{index}", spec)
    finally:
        if fault == "disk":
            _unmount(results)


def _trial(fault: str, run_dir: Path, spec: FaultSpec) -> Trial:
    proc = subprocess.Popen(command(fault, run_dir, spec), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    t_inject, deadline = None, time.monotonic() + spec.timeout_s
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if t_inject is None and _training(run_dir, fault, spec):
                inject(fault, run_dir, proc)
                t_inject = time.monotonic()
            time.sleep(0.1)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # perfkit did not stop on Ctrl-C within a minute: stopped hard
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate(timeout=60)
        if fault == "kill" and t_inject is not None:  # the janitor writes the run's end after the launcher
            while read_object(run_dir / "run.json").get("status") in (None, "running") and time.monotonic() < deadline:
                time.sleep(0.1)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    detect = time.monotonic() - t_inject if t_inject is not None and proc.returncode else None
    return judge(fault, run_dir, t_inject is not None, detect, proc.returncode, err.decode("utf-8", "replace"))


def _mount_disk(disk: Path, root: Path) -> Path:
    """A tmpfs of DISK_SIZE as the trial's results directory; the data cache stays off it (a symlink)."""
    disk.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(disk)], check=True,
                   capture_output=True, timeout=30)
    (root / "datasets").mkdir(parents=True, exist_ok=True)
    (disk / "datasets").symlink_to((root / "datasets").resolve())
    return disk


def _unmount(disk: Path) -> None:
    if subprocess.run(["umount", str(disk)], capture_output=True, timeout=60).returncode:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=60)


def fill(disk: Path) -> None:
    """Take every byte left on ``disk``."""
    with open(disk / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 16))
                fh.flush()
        except OSError:
            pass


def judge(fault: str, run_dir: Path, injected: bool, detect_s: float | None, code: int | None, err: str) -> Trial:
    meta = read_object(run_dir / "run.json")
    failure = meta.get("failure") or {}
    lines = [ln for ln in err.splitlines() if ln.startswith("perfkit: error:")]
    if fault == "link":
        named = bool(failure.get("lost_links"))
    elif fault == "disk":
        named = bool(lines) and "no space left on device" in lines[-1] and str(run_dir) in lines[-1]
    elif fault == "kill":
        named = meta.get("status") == "interrupted" and "launcher" in str(meta.get("error"))
    else:
        named = (failure.get("hung") or [None])[0] == VICTIM
    return Trial(fault, injected, detect_s, code, named, meta.get("status"), lines[-1] if lines else err[-300:],
                 steps_kept(run_dir))


def steps_kept(run_dir: Path) -> int | None:
    import pandas as pd

    total = 0
    for part in sorted((run_dir / "workers").glob("*/steps.parquet")):
        try:
            total += len(pd.read_parquet(part))
        except (OSError, ValueError):
            return None
    return total


# The status a run must end with for what it recorded to count as kept: a full disk may refuse even run.json,
# which perfkit's error line then says (checked as "named").
_KEPT = {"kill": ("interrupted",), "disk": ("failed", "running")}
_KEPT.update({f: ("failed",) for f in ("stop", "sleep", "lock", "link")})


def summarise(trials: list[Trial]) -> dict[str, Any]:
    """Per fault: trials, injected, named right, injection to verdict (median, max), failed run kept."""
    out: dict[str, Any] = {}
    for fault in dict.fromkeys(t.fault for t in trials):
        mine = [t for t in trials if t.fault == fault]
        times = sorted(t.detect_s for t in mine if t.detect_s is not None)
        out[fault] = {"n": len(mine), "named": sum(t.named for t in mine), "injected": sum(t.injected for t in mine),
                      "detect_s_median": times[len(times) // 2] if times else None,
                      "detect_s_max": times[-1] if times else None,
                      "kept": sum(t.status in _KEPT[fault] and t.steps_kept is not None for t in mine)}
    return out
