"""perfkit watch's alarm: a worker whose host's CPU budget is cut while it trains, named as the one the
others wait for (``--format json``'s ``slowest``), and how soon; runs where nothing changes, watched as long,
for false flags.

Each run: two emulated hosts of ``--cores`` each, one worker on each, the tiny preset without a trace window,
trained until stopped. Once its first epoch is done, ``perfkit watch RUN --format json`` reads it; after
``--before`` seconds, the ``cut`` arm divides host b's budget by ``--cut`` (its cgroup's quota, written
here); the ``steady`` arm changes nothing. A cut run is detected when a line names worker 1 within
``--after`` seconds of the cut; any line naming a worker before the cut, or in a steady run, is a false
flag. Needs root (emulated hosts).

    python -m benchmarks watch-alarm --repeats 20      # 20 cut runs and 20 steady ones, interleaved
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import PERFKIT, Report, conclude, finish_args, heading, make_parser, markdown_table, progress
from benchmarks._runs import runs_dir
from perfkit.cluster import free_ports

NAME = "watch-alarm"
ARMS = ("cut", "steady")


@dataclass
class Watched:
    arm: str
    run_dir: str | None = None
    lines: int = 0
    flags_before: int = 0  # lines naming a worker before the cut (or ever, in a steady run)
    detected_s: float | None = None  # seconds from the cut to the first line naming worker 1
    named: list[int] = field(default_factory=list)  # the workers lines named after the cut
    flags: list[dict[str, Any]] = field(default_factory=list)  # each false flag: when, whom, the others' wait
    error: str | None = None


def _cluster(path: Path, cores: float) -> Path:
    a, b = free_ports(2)
    path.write_text("".join(f'[[hosts]]\nname = "{n}"\naddress = "127.0.0.{i + 1}"\ncores = {cores}\nworkers = 1\n'
                            f"base_port = {p}\n\n" for i, (n, p) in enumerate((("a", a), ("b", b)))))
    return path


def _training(results: Path, proc: subprocess.Popen[str], timeout: float) -> Path:
    """The run directory once both workers finished an epoch."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for status in results.glob("*/workers/1/status.json"):
            try:
                if (json.loads(status.read_text()).get("epochs_done") or 0) >= 1:
                    return status.parents[2]
            except ValueError:
                pass
        if proc.poll() is not None:
            raise RuntimeError(f"the run ended early ({proc.returncode})")
        time.sleep(0.5)
    raise RuntimeError(f"no epoch done within {timeout:.0f} s")


def _cut(run_dir: Path, host: str, factor: float) -> None:
    """Divide ``host``'s CPU quota by ``factor`` in its cgroup (v1 ``cpu.cfs_quota_us`` or v2 ``cpu.max``)."""
    meta = json.loads((run_dir / "run.json").read_text())
    group = Path(meta["cluster"]["cpu_budget"]["quota"]["groups"][host])
    if (group / "cpu.max").exists():
        quota, period = (group / "cpu.max").read_text().split()
        (group / "cpu.max").write_text(f"{max(1000, int(int(quota) / factor))} {period}")
    else:
        quota = int((group / "cpu.cfs_quota_us").read_text())
        (group / "cpu.cfs_quota_us").write_text(str(max(1000, int(quota / factor))))


def watch_once(arm: str, root: Path, i: int, args: Any) -> Watched:
    out = Watched(arm)
    results = root / f"{arm}-{i}"
    cluster = _cluster(root / f"{arm}-{i}.toml", args.cores)
    run = subprocess.Popen([*PERFKIT, "run", "--mode", "multi", "--cluster", str(cluster), "--preset", "tiny",
                            "--epochs", "1000", "--no-profile", "--results-dir", str(results), "--quiet"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    watch = None
    try:
        run_dir = _training(results, run, args.timeout)
        out.run_dir = str(run_dir)
        watch = subprocess.Popen([*PERFKIT, "watch", str(run_dir), "--format", "json"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        t0 = time.monotonic()
        cut_at = t0 + args.before
        end = cut_at + args.after
        cut = False
        while time.monotonic() < end and out.detected_s is None:
            if arm == "cut" and not cut and time.monotonic() >= cut_at:
                _cut(run_dir, "b", args.cut)
                cut, cut_at = True, time.monotonic()
            ready = select.select([watch.stdout], [], [], 0.5)[0]
            line = watch.stdout.readline() if ready else ""  # type: ignore[union-attr]
            if not line:
                continue
            out.lines += 1
            slowest = json.loads(line).get("slowest")
            if slowest is None:
                continue
            if not cut:
                out.flags_before += 1
                out.flags.append({"t_s": round(time.monotonic() - t0, 1), **slowest})
            else:
                out.named.append(int(slowest["worker"]))
                if slowest["worker"] == 1:
                    out.detected_s = round(time.monotonic() - cut_at, 2)
    except (RuntimeError, OSError, KeyError, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    finally:
        for p in (watch, run):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in (watch, run):
            if p is not None:
                try:
                    p.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
    return out


def summarise(runs: list[Watched]) -> dict[str, Any]:
    cut = [r for r in runs if r.arm == "cut" and r.error is None]
    steady = [r for r in runs if r.arm == "steady" and r.error is None]
    times = sorted(r.detected_s for r in cut if r.detected_s is not None)
    return {"cut_runs": len(cut), "detected": len(times),
            "detection_s_median": times[len(times) // 2] if times else None,
            "detection_s_max": times[-1] if times else None,
            "wrong_worker_named": sum(1 for r in cut if any(w != 1 for w in r.named)),
            "steady_runs": len(steady), "steady_runs_flagged": sum(1 for r in steady if r.flags_before),
            "cut_runs_flagged_before": sum(1 for r in cut if r.flags_before),
            "lines": sum(r.lines for r in runs), "errors": sum(r.error is not None for r in runs)}


def table(report: Report) -> str:
    s = report.results["summary"]
    rows = [["cut", s["cut_runs"], f"{s['detected']}/{s['cut_runs']}", s["detection_s_median"], s["detection_s_max"],
             s["cut_runs_flagged_before"]], ["steady", s["steady_runs"], "-", "-", "-", s["steady_runs_flagged"]]]
    return "\n".join([heading(report), "", markdown_table(
        ["arm", "N", "worker 1 named after the cut", "seconds to name: median", "max", "runs with a false flag"],
        rows, right=(1, 3, 4, 5))])


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_preset=None, default_repeats=20)
    p.add_argument("--cores", type=float, default=1.0, help="each emulated host's CPU budget")
    p.add_argument("--cut", type=float, default=4.0, help="host b's budget is divided by this")
    p.add_argument("--before", type=float, default=20.0, help="seconds watched before the cut")
    p.add_argument("--after", type=float, default=30.0, help="seconds watched after it")
    p.set_defaults(timeout=240.0)
    args = finish_args(p.parse_args(argv))
    if args.smoke:
        args.before, args.after = 5.0, 30.0
    root = runs_dir(args.results_root, NAME, args.stamp)
    report = Report(NAME, {k: v for k, v in vars(args).items() if k != "results_root"})
    report.targets = {"detected_share": 0.99, "detection_s_max": 30.0, "steady_runs_flagged": 0}
    runs: list[Watched] = []
    for i in range(args.repeats):
        for arm in ARMS:
            progress(f"[{i + 1}/{args.repeats}] {arm}")
            r = watch_once(arm, root, i, args)
            runs.append(r)
            if r.error:
                report.errors.append(f"{arm} #{i + 1}: {r.error}")
    report.results = {"summary": summarise(runs), "runs": [asdict(r) for r in runs]}
    return conclude(report, args, table)


if __name__ == "__main__":
    sys.exit(main())
