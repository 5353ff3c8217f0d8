"""Faults a real cluster has, injected into real runs: how fast perfkit names them, and whether it names the
right worker or link (target: the stopped or stuck worker named first, as the cause, within 60 s at the
quick preset; every fault named right; nothing recorded lost).

Each trial starts a 2-worker run, waits until worker 1 is training in epoch ``--at-epoch`` (its heartbeat
says so), injects the fault, and times from the injection to perfkit's exit:
- ``stop``: ``SIGSTOP`` of worker 1 (``perfkit run --workers 2``);
- ``sleep`` / ``lock``: worker 1 of an unmodified script stuck in its own Keras callback, in ``time.sleep``
  or on a lock it already holds (``perfkit launch --workers 2 -- python bench/stuck_script.py``);
- ``link``: the second emulated host's ``eth0`` set down in its network namespace
  (``perfkit run --cluster examples/unequal-pair.toml --emulate``; needs root and ``ip``);
- ``disk``: the results directory, a tmpfs of 8 MiB mounted for the trial (root), filled to the last byte;
- ``kill``: ``SIGKILL`` of perfkit's own launcher (``perfkit run --workers 2``), timed to run.json's last word.
Named right: the run's failure names worker 1 first as the cause (``failure.hung``), or the two hosts as
having lost each other (``failure.lost_links``); the full disk's path and reason in perfkit's one error line;
the killed launcher's run ``interrupted`` saying so. Kept: run.json says ``failed`` (``interrupted`` after a
kill; a full disk may leave it ``running`` when even that write was refused, which the error line must say)
and every worker's ``steps.parquet`` reads, with the steps it holds counted.

    python -m benchmarks faults --repeats 5            # 4 faults x 5 = 20 trials
    python -m benchmarks faults --faults stop,sleep --smoke
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import (
    CHECKOUT,
    PERFKIT,
    Report,
    conclude,
    env_with_repo,
    finish_args,
    heading,
    make_parser,
    markdown_table,
    progress,
    smoke_size,
)
from benchmarks._runs import runs_dir

NAME = "faults"
FAULTS = ("stop", "sleep", "lock", "link", "disk", "kill")
DISK_SIZE = "8m"  # room for the run's start; the trial fills the rest
TARGET_S = 60.0
VICTIM = 1
SMOKE_HANG_S = 10.0  # the auto limit is unit-tested (tests/unit/test_hang.py); the smoke checks who is named
STUCK_SCRIPT = Path(__file__).with_name("stuck_script.py")
PAIR = CHECKOUT / "examples" / "unequal-pair.toml"


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


def command(fault: str, run_dir: Path, args: Any) -> list[str]:
    common = ["--results-dir", str(run_dir.parent), "--run-id", run_dir.name, "--quiet", "--no-profile",
              "--hang-timeout", args.hang_timeout]
    if fault in ("sleep", "lock"):
        return [*PERFKIT, "launch", "--workers", "2", *common, "--", sys.executable, str(STUCK_SCRIPT),
                "--how", fault, "--stuck-worker", str(VICTIM), "--at-batch", str(args.at_step)]
    where = ["--cluster", str(PAIR), "--emulate"] if fault == "link" else ["--workers", "2"]
    return [*PERFKIT, "run", "--mode", "multi", *where, "--preset", args.preset, "--epochs", str(args.epochs),
            *smoke_size(args), *common]


def _training(run_dir: Path, fault: str, args: Any) -> bool:
    """Worker 1 is where the fault goes in: training, past the step it is injected at."""
    try:
        beat = json.loads((run_dir / "workers" / str(VICTIM) / "heartbeat.json").read_text())
    except (OSError, ValueError):
        return False
    if fault in ("sleep", "lock"):  # the script gets stuck by itself at --at-step
        return True
    if fault == "disk":  # a saved epoch first, so that something recorded is there to keep
        try:
            done = json.loads((run_dir / "workers" / str(VICTIM) / "status.json").read_text()).get("epochs_done")
        except (OSError, ValueError):
            return False
        return int(done or 0) >= 1
    step = beat.get("step")
    return int(beat.get("epoch") or 0) >= args.at_epoch and step is not None and int(step) >= args.at_step


def inject(fault: str, run_dir: Path, proc: subprocess.Popen[bytes]) -> None:
    if fault == "kill":
        os.kill(proc.pid, signal.SIGKILL)  # the perfkit command itself is the launcher
    elif fault == "disk":
        fill(run_dir.parent)
    elif fault == "stop":
        status = json.loads((run_dir / "workers" / str(VICTIM) / "status.json").read_text())
        os.kill(int(status["pid"]), signal.SIGSTOP)
    elif fault == "link":
        meta = json.loads((run_dir / "run.json").read_text())
        host = meta["cluster"]["hosts"][VICTIM]["name"]
        subprocess.run(["ip", "-n", meta["network"]["namespaces"][host], "link", "set", "eth0", "down"],
                       check=True, timeout=30)


def trial(fault: str, root: Path, index: int, args: Any) -> Trial:
    results = _mount_disk(root / f"disk-{index}", root) if fault == "disk" else root
    try:
        return _trial(fault, results / f"{fault}-{index}", args)
    finally:
        if fault == "disk":
            _unmount(results)


def _trial(fault: str, run_dir: Path, args: Any) -> Trial:
    proc = subprocess.Popen(command(fault, run_dir, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env_with_repo(), start_new_session=True)
    t_inject, deadline = None, time.monotonic() + args.timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if t_inject is None and _training(run_dir, fault, args):
                inject(fault, run_dir, proc)
                t_inject = time.monotonic()
            time.sleep(0.1)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        if fault == "kill" and t_inject is not None:  # the janitor writes the run's end after the launcher
            _until(lambda: _status(run_dir) not in (None, "running"), deadline)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    ended = time.monotonic()
    detect = ended - t_inject if t_inject is not None and proc.returncode else None
    return judge(fault, run_dir, t_inject is not None, detect, proc.returncode, err.decode("utf-8", "replace"))


def _until(done: Any, deadline: float) -> None:
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)


def _status(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "run.json").read_text()).get("status")
    except (OSError, ValueError):
        return None


def _mount_disk(disk: Path, root: Path) -> Path:
    """A tmpfs of DISK_SIZE as the trial's results directory; the data cache stays off it (a symlink)."""
    disk.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(disk)], check=True,
                   capture_output=True, timeout=30)
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
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        meta = {}
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
    out: dict[str, Any] = {}
    for fault in dict.fromkeys(t.fault for t in trials):
        mine = [t for t in trials if t.fault == fault]
        times = sorted(t.detect_s for t in mine if t.detect_s is not None)
        out[fault] = {"n": len(mine), "named": sum(t.named for t in mine), "injected": sum(t.injected for t in mine),
                      "detect_s_median": times[len(times) // 2] if times else None,
                      "detect_s_max": times[-1] if times else None,
                      "kept": sum(t.status in _KEPT[fault] and t.steps_kept is not None for t in mine)}
    return out


def table(report: Report) -> str:
    rows = [[fault, s["n"], f"{s['named']}/{s['n']}",
             "-" if s["detect_s_median"] is None else f"{s['detect_s_median']:.1f} (max {s['detect_s_max']:.1f})",
             f"{s['kept']}/{s['n']}"] for fault, s in report.results["faults"].items()]
    total = report.results["trials"]
    named = sum(t["named"] for t in total)
    return "\n".join([heading(report), "", markdown_table(
        ["fault", "N", "named right", "injection to perfkit's verdict, s: median (max)", "failed run kept readable"],
        rows, right=(1,)), "", f"Named right in {named} of {len(total)} trials (target: all, each within "
        f"{TARGET_S:g} s)."])


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_repeats=5)
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated: {', '.join(FAULTS)}")
    p.add_argument("--epochs", type=int, default=3, help="epochs of each run (the fault comes first)")
    p.add_argument("--at-epoch", type=int, default=1, help="inject once worker 1 trains in this epoch (0-based)")
    p.add_argument("--at-step", type=int, default=10, help="... at this step of it or later")
    p.add_argument("--hang-timeout", default="auto", help="perfkit's --hang-timeout for every trial (--smoke: "
                   f"{SMOKE_HANG_S:g} s, so that CI does not wait out the auto limit's 30 s floor)")
    args = p.parse_args(argv)
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    bad = [f for f in faults if f not in FAULTS]
    if bad or not faults:
        p.error(f"--faults: {', '.join(bad) or 'none given'}: choose from {', '.join(FAULTS)}")
    args = finish_args(args)
    if args.smoke:  # tiny runs of 4 steps an epoch: inject in the second epoch, long before the last
        args.epochs, args.at_step, args.hang_timeout = 30, 1, f"{SMOKE_HANG_S:g}"
    root = runs_dir(args.results_root, NAME, args.stamp)
    report = Report(NAME, {k: v for k, v in vars(args).items() if k != "results_root"} | {"faults": faults})
    report.targets = {"detect_s": TARGET_S}
    trials: list[Trial] = []
    for i in range(args.repeats):  # faults interleaved round by round
        for fault in faults:
            progress(f"[{i + 1}/{args.repeats}] {fault}")
            t = trial(fault, root, i, args)
            trials.append(t)
            if not (t.named and t.detect_s is not None and t.detect_s <= TARGET_S):
                report.errors.append(f"{fault} #{i + 1}: named={t.named} in {t.detect_s} s: {t.message}")
    report.results = {"faults": summarise(trials), "trials": [asdict(t) for t in trials]}
    return conclude(report, args, table)


if __name__ == "__main__":
    sys.exit(main())
