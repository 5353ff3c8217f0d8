"""Benchmark: ``perfkit analyze`` of large generated runs: wall time, CPU time and peak RSS (issue 31).

Two cases, each a results folder written once by ``benchmarks.synthetic`` in the exact on-disk format (a
single-mode baseline beside a multi-worker run, CPU samples in the sampler's order, trace tables for every
step: the worst case for the trace figures, whose ``auto`` window is 10 steps):

- ``4w``: 4 workers on two hosts (3 + 1), 200k steps per worker, 1M CPU samples, the profiler's 4
  ``<host>-w<i>.xplane.pb`` copied in from tests/data in a checkout. Goals: the command <= 2 s, and a second
  analysis of the same run (the analysis cache, analysis/runcache.py) < 1 s.
- ``16w``: 16 workers on two hosts (12 + 4), 200k steps per worker (the same global batch split 16 ways:
  the same steps per worker as 4 workers), 10M CPU samples. Goals: <= 5 s and <= 1.5 GB peak RSS.
- ``64w`` and ``256w`` (issue 53's cluster scale; not in the default ``--cases``): 48 + 16 and 192 + 64
  workers, 10M and 40M step rows in all, 40M and 160M CPU samples, shaped as a long run records itself:
  one 10-step trace window per worker, each worker's start-up states, and one restart (the cluster lost
  half of its third epoch). Goals: <= 20 s and <= 4 GB; <= 90 s and <= 8 GB.

The goals are issue 53's; 4w's: <= 1.5 s, and <= 0.5 s for the second analysis.

Arms, interleaved in every round, each a fresh process timed whole (Python start and imports included),
peak RSS and CPU seconds from ``wait4``: ``uncached`` (the cache removed first; what a first ``perfkit
analyze --results-dir D --html F`` costs: console table and HTML report), ``cached`` (the same command
again, reading the cache the uncached arm left) and, for 4w, ``json`` (``--format json --output F
--no-html``, uncached); ``--smoke`` (tiny runs, one round) runs 4w uncached and cached and 16w uncached.
``--before DIR`` adds the uncached and json arms run with another perfkit source tree (``DIR`` holds its
``perfkit`` package): before and after side by side, interleaved.

    python -m benchmarks analysis-speed --repeats 3 [--before /path/to/old/tree]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks._common import (
    CHECKOUT,
    PERFKIT,
    Proc,
    Report,
    choice_list,
    conclude,
    env_with_repo,
    finish_args,
    fmt_range,
    heading,
    interleave,
    make_parser,
    markdown_table,
    progress,
    rss_floor_bytes,
    run_measured,
    stats,
)

NAME = "analysis-speed"
GENERATED = "GENERATED "
FIXTURES = CHECKOUT / "tests" / "data"
GB = 1e9
# case -> (workers per host, steps per worker, CPU rows, goals); the sizes the goals are stated at
AT_SCALE = {"trace_window": 10, "restart_epoch": 2, "phases": True}  # a long run's shape (docstring)
CASES: dict[str, dict[str, Any]] = {
    "4w": {"hosts": (("big", 1.6, 3), ("small", 0.4, 1)), "steps": 200_000, "cpu_rows": 1_000_000,
           "goals": {"uncached_wall_s": 1.5, "cached_wall_s": 0.5}},
    "16w": {"hosts": (("big", 6.4, 12), ("small", 1.6, 4)), "steps": 200_000, "cpu_rows": 10_000_000,
            "goals": {"uncached_wall_s": 5.0, "uncached_peak_rss_gb": 1.5}},
    "64w": {"hosts": (("big", 25.6, 48), ("small", 6.4, 16)), "steps": 156_250, "cpu_rows": 40_000_000,
            "goals": {"uncached_wall_s": 20.0, "uncached_peak_rss_gb": 4.0}, "shape": AT_SCALE},
    "256w": {"hosts": (("big", 102.4, 192), ("small", 25.6, 64)), "steps": 156_250, "cpu_rows": 160_000_000,
             "goals": {"uncached_wall_s": 90.0, "uncached_peak_rss_gb": 8.0}, "shape": AT_SCALE},
}
# (steps, CPU rows): seconds, not minutes
SMOKE = {"4w": (2_000, 10_000), "16w": (500, 20_000), "64w": (200, 20_000), "256w": (100, 40_000)}


def generate(root: Path, hosts: tuple[tuple[str, float, int], ...], steps: int, cpu_rows: int,
             shape: dict[str, Any] | None = None) -> dict[str, Any]:
    """A baseline and a multi-worker run under ``root`` (``shape``: SyntheticSpec's trace window, restart and
    start-up states); what was written and how long it took."""
    from benchmarks.synthetic import SyntheticSpec, write_synthetic_baseline, write_synthetic_run

    spec = SyntheticSpec(hosts=hosts, steps=steps, cpu_rows=cpu_rows, **(shape or {}))
    start = time.perf_counter()
    baseline = write_synthetic_baseline(root, spec)
    run = write_synthetic_run(root, spec)[0]
    seconds = time.perf_counter() - start
    xplanes = _add_xplanes(run, spec.workers, spec.host_of())
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return {"run": run.name, "baseline": baseline.name, "workers": spec.workers, "steps_per_worker": steps,
            "cpu_rows": cpu_rows, "xplane_files": xplanes, "generate_s": seconds, "bytes_on_disk": size}


def generate_apart(root: Path, case: str, steps: int, cpu_rows: int, timeout: float) -> dict[str, Any]:
    """``generate`` of ``case`` in a process of its own. Not in this one: a command this process starts
    inherits its peak memory (Linux keeps the fork's high-water mark in the exec'd child's ``ru_maxrss``), so
    the generator's gigabytes would be counted in every measured analysis."""
    proc = run_measured([sys.executable, "-m", "benchmarks.analysis_speed", "--generate", str(root), "--cases", case,
                         "--steps", str(steps), "--cpu-rows", str(cpu_rows)], timeout, env=env_with_repo())
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(GENERATED)), None)
    if not proc.ok or line is None:
        raise SystemExit(f"generating the {case} run failed: {proc.error() or 'no result line'}")
    return json.loads(line[len(GENERATED):])


def _add_xplanes(run: Path, workers: int, hosts: list[str]) -> int:
    """Copy the test fixtures' real xplane captures in as one file per worker (0 when not a checkout)."""
    fixtures = sorted(FIXTURES.glob("*.xplane.pb.gz"))
    if not fixtures:
        return 0
    session = run / "tensorboard" / "plugins" / "profile" / "synthetic"
    session.mkdir(parents=True, exist_ok=True)
    for w in range(workers):
        with gzip.open(fixtures[w % len(fixtures)], "rb") as src, open(session / f"{hosts[w]}-w{w}.xplane.pb",
                                                                       "wb") as dst:
            shutil.copyfileobj(src, dst)
    return workers


def drop_cache(root: Path) -> None:
    """Remove every run's analysis cache under ``root`` (the next analysis computes every figure)."""
    from perfkit.analysis.runcache import CACHE_DIR, CACHE_FILE

    for run in root.iterdir():
        (run / CACHE_FILE).unlink(missing_ok=True)
        shutil.rmtree(run / CACHE_DIR, ignore_errors=True)


def _arms(case: str, root: Path, args: argparse.Namespace) -> dict[str, Callable[[int], Proc]]:
    out = root.resolve() / "analysis"
    html = ["--html", str(out / "report.html")]
    as_json = ["--format", "json", "--output", str(out / "analysis.json"), "--no-html"]

    def analyze(extra: list[str], env: dict[str, str], fresh: bool, cwd: Path | None = None) -> Callable[[int], Proc]:
        def measure(i: int) -> Proc:
            if fresh:
                drop_cache(root)
            # absolute: the before arm runs in another directory, where a relative --results-root is not
            return run_measured([*PERFKIT, "analyze", "--results-dir", str(root.resolve()), *extra], args.timeout,
                                cwd=cwd, env=env)
        return measure

    now = env_with_repo()
    arms = {"uncached": analyze(html, now, True)}
    if case == "4w" or not args.smoke:  # --smoke: 3 commands in all (CI time)
        arms["cached"] = analyze(html, now, False)
    if case == "4w" and not args.smoke:
        arms["json"] = analyze(as_json, now, True)
    if args.before is not None:
        # ``python -m`` puts its working directory first on sys.path: run there, or a checkout's perfkit wins
        before, where = {**os.environ, "PYTHONPATH": str(args.before)}, args.before.resolve()
        arms["before uncached"] = analyze(html, before, True, where)
        if case == "4w":
            arms["before json"] = analyze(as_json, before, True, where)
    return arms


def measure_case(case: str, args: argparse.Namespace, report: Report) -> None:
    spec = CASES[case]
    steps, rows = SMOKE[case] if args.smoke else (args.steps[case], args.cpu_rows[case])
    root = args.results_root / "bench" / "runs" / f"{NAME}-{args.stamp}-{case}"
    workers = sum(n for _, _, n in spec["hosts"])
    progress(f"{case}: generating {workers} workers x {steps:,} steps, {rows:,} CPU samples")
    result: dict[str, Any] = {"generated": generate_apart(root, case, steps, rows, args.timeout), "arms": {}}
    # in order: the cached arm is the second analysis of what the uncached arm just computed
    got = interleave(_arms(case, root, args), args.repeats, lambda s: progress(f"{case} {s}"), rotate=False)
    for arm, procs in got.items():
        ok = [p for p in procs if p.ok]
        result["arms"][arm] = {"cmd": procs[0].cmd[2:], "wall_s": stats(p.wall_s for p in ok),
                               "cpu_s": stats(p.cpu_s for p in ok),
                               "peak_rss_bytes": stats(p.peak_rss_bytes for p in ok),
                               "stdout_tail": procs[-1].stdout[-1500:]}
        report.errors += [f"{case} {arm} #{i + 1}: {p.error()}" for i, p in enumerate(procs) if not p.ok]
    full = steps >= spec["steps"] and rows >= spec["cpu_rows"]
    result["goals"] = spec["goals"]
    result["meets"] = {goal: _meets(result["arms"], goal, limit) if full else None
                       for goal, limit in spec["goals"].items()}
    report.results[case] = result
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


def _meets(arms: dict[str, Any], goal: str, limit: float) -> bool | None:
    """``uncached_wall_s``: the arm's median wall time <= limit; ``..._peak_rss_gb``: its largest peak RSS."""
    arm, _, what = goal.partition("_")
    if arm not in arms:
        return None
    if what == "peak_rss_gb":
        worst = arms[arm]["peak_rss_bytes"]["max"]
        return None if worst is None else worst / GB <= limit
    med = arms[arm]["wall_s"]["median"]
    return None if med is None else (med < limit if arm == "cached" else med <= limit)


def table(report: Report) -> str:
    rows = []
    for case, r in report.results.items():
        if not isinstance(r, dict) or "arms" not in r:
            continue
        for arm, a in r["arms"].items():
            rss = {k: (v / GB if isinstance(v, (int, float)) and k in ("median", "min", "max") else v)
                   for k, v in a["peak_rss_bytes"].items()}
            rows.append([case, arm, fmt_range(a["wall_s"]), fmt_range(a["cpu_s"]), fmt_range(rss)])
    lines = [heading(report), "", markdown_table(["case", "arm", "wall s", "CPU s", "peak RSS GB"], rows,
                                                 right=(2, 3, 4))]
    for case, r in report.results.items():
        if isinstance(r, dict) and "generated" in r:
            g = r["generated"]
            goals = ", ".join(f"{k} {v:g}: {_word(r['meets'][k])}" for k, v in r["goals"].items())
            lines.append(f"\n{case}: {g['workers']} workers x {g['steps_per_worker']:,} steps, {g['cpu_rows']:,} CPU "
                         f"samples, {g['bytes_on_disk'] / 1e6:.0f} MB on disk (generated in {g['generate_s']:.1f} "
                         f"s). Goals: {goals}.")
    floor = report.results.get("rss_floor_bytes")
    if floor:
        lines.append(f"\nPeak RSS floor (a bare `python -c pass` started by this benchmark): {floor / GB:.3f} GB.")
    lines.append(f"\nLoad average at the end: {report.results.get('load_average_end')}.")
    return "\n".join(lines)


def _word(meets: bool | None) -> str:
    return "not at full size" if meets is None else "meets" if meets else "misses"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_preset=None, default_repeats=3)
    p.add_argument("--cases", default="4w,16w", help="comma-separated: 4w, 16w, 64w, 256w")
    p.add_argument("--steps", type=int, default=None, help="steps per worker of every case (default: the case's)")
    p.add_argument("--cpu-rows", type=int, default=None, help="rows of cpu.parquet of every case (default: the case's)")
    p.add_argument("--before", type=Path, default=None, help="another perfkit tree (holding perfkit/) to compare")
    p.add_argument("--keep", action="store_true", help="keep the generated run directories")
    p.add_argument("--generate", type=Path, default=None, help=argparse.SUPPRESS)  # generate_apart's process
    args = p.parse_args(argv)
    if args.generate is not None:
        case = CASES[args.cases]
        info = generate(args.generate, case["hosts"], args.steps or case["steps"], args.cpu_rows or case["cpu_rows"],
                        case.get("shape"))
        print(GENERATED + json.dumps(info), flush=True)
        return 0
    args = finish_args(args)
    cases = choice_list("--cases", args.cases, list(CASES))
    args.steps = {c: args.steps or CASES[c]["steps"] for c in cases}
    args.cpu_rows = {c: args.cpu_rows or CASES[c]["cpu_rows"] for c in cases}
    args.timeout = min(args.timeout, 600.0)  # the preset-based default is for trainings
    report = Report(NAME, {"repeats": args.repeats, "cases": cases, "steps": args.steps, "cpu_rows": args.cpu_rows,
                           "before": str(args.before) if args.before else None, "smoke": args.smoke})
    report.targets = {c: CASES[c]["goals"] for c in cases}
    for case in cases:
        measure_case(case, args, report)
    report.results["rss_floor_bytes"] = rss_floor_bytes()
    report.results["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return conclude(report, args, table)


if __name__ == "__main__":
    raise SystemExit(main())
