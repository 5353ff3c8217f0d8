"""Benchmark 3: local multi-worker efficiency, pinned/capped vs not, against single mode.

Interleaved round by round: ``perfkit run --mode single``, then for each N in ``--workers`` (default 2,4)
``perfkit run --mode multi --workers N`` (the default launch: each worker pinned to its cores with
TensorFlow's thread pools capped) and the same with ``--no-pin``. Figure: steady global samples/s and its
ratio to the single run of the same round. The default launch must be the better of the two, and 2
workers should reach >= 1.05x single. On a 2-core machine there is no spare hardware for workers to add:
this measures what distribution costs here, and what pinning saves.

    python -m benchmarks multiworker --preset quick --repeats 3
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from benchmarks._common import (
    Report,
    conclude,
    finish_args,
    fmt,
    fmt_range,
    heading,
    interleave,
    make_parser,
    markdown_table,
    progress,
    ratios,
    smoke_size,
)
from benchmarks._runs import Training, perfkit_run, runs_dir, training_summary

NAME = "multiworker"
TARGET_TWO_WORKERS = 1.05


def arms(args: argparse.Namespace) -> dict[str, Callable[[int], Training]]:
    runs = runs_dir(args.results_root, NAME, args.stamp)
    base = ["--preset", args.preset, *smoke_size(args)]

    def arm(label: str, extra: list[str]) -> Callable[[int], Training]:
        return lambda i: perfkit_run(f"{label} #{i + 1}", [*extra, *base], runs, args.timeout)

    out = {"single": arm("single", ["--mode", "single"])}
    for n in args.workers:
        out[f"{n}w pinned"] = arm(f"{n}w pinned", ["--mode", "multi", "--workers", str(n)])
        out[f"{n}w unpinned"] = arm(f"{n}w unpinned", ["--mode", "multi", "--workers", str(n), "--no-pin"])
    return out


def measure(args: argparse.Namespace) -> Report:
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats, "workers": args.workers})
    report.targets = {"two_workers_pinned_ratio_min": TARGET_TWO_WORKERS, "default_launch_is_better": True}
    got = interleave(arms(args), args.repeats, progress)
    report.results = {name: training_summary(tr) for name, tr in got.items()}
    single = [t.steady_samples_per_s for t in got["single"]]
    report.results["ratio_to_single"] = {
        name: ratios([t.steady_samples_per_s for t in tr], single) for name, tr in got.items() if name != "single"}
    report.results["verdicts"] = verdicts(report.results, args.workers)
    for tr in got.values():
        report.errors += [f"{t.label}: {t.error}" for t in tr if t.error]
    return report


def verdicts(results: dict[str, Any], workers: list[int]) -> dict[str, Any]:
    ratio = results["ratio_to_single"]
    out: dict[str, Any] = {}
    for n in workers:
        pinned, unpinned = ratio[f"{n}w pinned"]["median"], ratio[f"{n}w unpinned"]["median"]
        out[f"{n}w default_is_better"] = None if pinned is None or unpinned is None else pinned >= unpinned
        out[f"{n}w pinned_over_unpinned"] = pinned / unpinned if pinned and unpinned else None
    if 2 in workers:
        med = ratio["2w pinned"]["median"]
        out["2w meets_target"] = None if med is None else med >= TARGET_TWO_WORKERS
    return out


def table(report: Report) -> str:
    r = report.results
    rows = []
    for name in [k for k in r if k not in ("ratio_to_single", "verdicts")]:
        ratio = r["ratio_to_single"].get(name)
        rows.append([name, fmt_range(r[name]["steady_samples_per_s"], ",.0f"), fmt_range(r[name]["steady_epoch_s"]),
                     fmt_range(ratio, ".2f") if ratio else "1 (baseline)",
                     _cpu(r[name]["runs"]), fmt_range(r[name]["val_accuracy"], ".4f")])
    head = ["launch", "samples/s", "steady epoch s", "x single", "CPU% worker 0", "val accuracy"]
    v = r["verdicts"]
    notes = []
    for n in report.params["workers"]:
        better = v.get(f"{n}w default_is_better")
        notes.append(f"{n} workers: the default (pinned) launch is "
                     f"{'better' if better else 'worse' if better is False else 'not measured'} "
                     f"({fmt(v.get(f'{n}w pinned_over_unpinned'), '.2f', 'n/a')}x unpinned)")
    if "2w meets_target" in v:
        met = v["2w meets_target"]
        notes.append(f"2 pinned workers {'meet' if met else 'miss' if met is False else 'did not measure'} "
                     f"the target >= {TARGET_TWO_WORKERS}x single")
    return f"{heading(report)}\n\n{markdown_table(head, rows, right=(1, 2, 3, 4, 5))}\n\n" + "; ".join(notes) + "."


def _cpu(runs: list[dict[str, Any]]) -> str:
    vals = sorted(r["cpu_mean"] for r in runs if r.get("cpu_mean") is not None)
    return f"{vals[len(vals) // 2]:.0f}%" if vals else "failed"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__)
    p.add_argument("--workers", default="2,4", help="comma-separated worker counts (each divides the batch)")
    args = p.parse_args(argv)
    args.workers = sorted({int(w) for w in str(args.workers).split(",") if w.strip()})
    if not args.workers or min(args.workers) < 2:
        raise SystemExit("--workers: give worker counts >= 2, e.g. 2,4")
    args = finish_args(args)
    if args.smoke:
        args.workers = [2]
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
