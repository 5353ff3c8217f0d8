"""Benchmark 5: ``perfkit analyze`` on a large generated run: wall time (target <= 5 s) and peak RSS.

``perfkit.bench.synthetic`` writes a single-mode baseline and a multi-worker run in the exact on-disk
format: 4 workers on two hosts (3 + 1), 200k steps per worker, 1M CPU samples, trace tables for every step;
the profiler's 4 ``<host>-w<i>.xplane.pb`` files are copied in from tests/data when this is a checkout
(``perfkit analyze`` reads the trace tables, not the xplane files, so they only make the directory real).
Then, interleaved: the command users type (``perfkit analyze --results-dir D``: console table and HTML
report) and the JSON export (``--format json --output F --no-html``), each a fresh process, timed whole
(Python start and imports included), peak RSS from ``wait4``.

    python -m perfkit.bench analysis --repeats 5
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import time
from pathlib import Path
from typing import Any

from perfkit.bench._common import (PERFKIT, Report, conclude, env_with_repo, finish_args, fmt_range, heading, interleave,
                           make_parser, markdown_table, progress, run_measured, stats)

NAME = "analysis"
TARGET_S = 5.0
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "data"


def generate(root: Path, steps: int, cpu_rows: int) -> dict[str, Any]:
    from perfkit.bench.synthetic import SyntheticSpec, write_synthetic_baseline, write_synthetic_run

    spec = SyntheticSpec(steps=steps, cpu_rows=cpu_rows)
    start = time.perf_counter()
    baseline = write_synthetic_baseline(root, spec)
    run = write_synthetic_run(root, spec)[0]
    seconds = time.perf_counter() - start
    xplanes = _add_xplanes(run, spec.workers, [h for h, _, n in spec.hosts for _ in range(n)])
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return {"run": run.name, "baseline": baseline.name, "workers": spec.workers, "steps_per_worker": steps,
            "cpu_rows": cpu_rows, "xplane_files": xplanes, "generate_s": seconds, "bytes_on_disk": size}


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


def measure(args: argparse.Namespace) -> Report:
    report = Report(NAME, {"repeats": args.repeats, "steps": args.steps, "cpu_rows": args.cpu_rows})
    report.targets = {"wall_s_max": TARGET_S, "at": "4 workers, 1M CPU samples, 200k steps"}
    root = args.results_root / "bench" / "runs" / f"{NAME}-{args.stamp}"
    progress(f"generating a run: {args.steps:,} steps x 4 workers, {args.cpu_rows:,} CPU samples")
    report.results["generated"] = generate(root, args.steps, args.cpu_rows)
    out = root / "analysis"

    def analyze(extra: list[str]) -> Any:
        return lambda i: run_measured([*PERFKIT, "analyze", "--results-dir", str(root), *extra], args.timeout,
                                      env=env_with_repo())

    arms = {"default": analyze(["--html", str(out / "report.html")]),
            "json": analyze(["--format", "json", "--output", str(out / "analysis.json"), "--no-html"])}
    got = interleave(arms, args.repeats, progress)
    for arm, procs in got.items():
        ok = [p for p in procs if p.ok]
        report.results[arm] = {"cmd": procs[0].cmd[2:], "wall_s": stats(p.wall_s for p in ok),
                               "peak_rss_bytes": stats(p.peak_rss_bytes for p in ok),
                               "stdout_tail": procs[-1].stdout[-2000:]}
        report.errors += [f"{arm} #{i + 1}: {p.error()}" for i, p in enumerate(procs) if not p.ok]
    med = report.results["default"]["wall_s"]["median"]
    full = args.steps >= 200_000 and args.cpu_rows >= 1_000_000
    report.results["meets_target"] = None if med is None or not full else med <= TARGET_S
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return report


def table(report: Report) -> str:
    r = report.results
    g = r["generated"]
    rows = []
    for arm, label in (("default", "perfkit analyze (table + HTML)"), ("json", "perfkit analyze --format json")):
        rss = {k: (v / 1e9 if isinstance(v, (int, float)) and k in ("median", "min", "max") else v)
               for k, v in r[arm]["peak_rss_bytes"].items()}
        rows.append([label, fmt_range(r[arm]["wall_s"]), fmt_range(rss)])
    met = r["meets_target"]
    verdict = "not at full size" if met is None else "meets" if met else "misses"
    return (f"{heading(report)}\n\nRun: {g['workers']} workers x {g['steps_per_worker']:,} steps, "
            f"{g['cpu_rows']:,} CPU samples, {g['xplane_files']} xplane files, "
            f"{g['bytes_on_disk'] / 1e6:.0f} MB on disk (generated in {g['generate_s']:.1f} s).\n\n"
            f"{markdown_table(['command', 'wall s', 'peak RSS GB'], rows, right=(1, 2))}\n\n"
            f"Target <= {TARGET_S:.0f} s for the whole command: {verdict}.")


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_preset=None, default_repeats=5)
    p.add_argument("--steps", type=int, default=200_000, help="training steps per worker")
    p.add_argument("--cpu-rows", type=int, default=1_000_000, help="rows of cpu.parquet")
    p.add_argument("--keep", action="store_true", help="keep the generated run directories")
    args = finish_args(p.parse_args(argv))
    if args.smoke:
        args.steps, args.cpu_rows = 2_000, 10_000
    if args.timeout > 600:  # the preset-based default is for trainings; analysis needs far less
        args.timeout = 600.0
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
