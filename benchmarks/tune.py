"""Benchmark: advice tried (`perfkit tune`) on several configurations: each knob's gain with N and range,
each prediction's error, and the tuned configuration against the single-machine baseline.

For each configuration (``--configs``: ``2w`` and ``4w`` local pinned workers, ``blog`` the README's emulated
cluster, examples/blog-cluster.toml), one ``perfkit tune --try K --repeats R`` in a subprocess (its rounds
interleave the default and every change), then its table. Targets: 2 local pinned workers tuned >= 1.05x the
single-machine baseline; every tried change's prediction within 10% of its measured speedup.

    python -m benchmarks tune --repeats 2 --configs 2w,blog
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from benchmarks._common import (
    CHECKOUT,
    PERFKIT,
    Report,
    choice_list,
    conclude,
    env_with_repo,
    finish_args,
    fmt,
    heading,
    make_parser,
    markdown_table,
    progress,
    run_measured,
)
from benchmarks._runs import runs_dir

NAME = "tune"
CLUSTER = CHECKOUT / "examples" / "blog-cluster.toml"
CONFIGS = {"2w": ["--workers", "2"], "4w": ["--workers", "4"], "blog": ["--cluster", str(CLUSTER)]}
TARGET_TUNED_2W = 1.05
TARGET_ERROR = 0.10


def measure(args: argparse.Namespace) -> Report:
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats, "try": args.try_, "configs": args.configs})
    report.targets = {"tuned_2w_vs_single_min": TARGET_TUNED_2W, "prediction_error_max": TARGET_ERROR}
    for name in args.configs:
        results = runs_dir(args.results_root, NAME, args.stamp) / name
        progress(f"{name}: perfkit tune")
        proc = run_measured([*PERFKIT, "tune", "--preset", args.preset, *CONFIGS[name], "--try", str(args.try_),
                             "--repeats", str(args.repeats), "--results-dir", str(results), "--quiet"],
                            args.timeout * (2 + args.repeats * (1 + args.try_)), env=env_with_repo())
        tables = sorted((results / "tune").glob("tune-*.json")) if (results / "tune").is_dir() else []
        if proc.rc != 0 or not tables:
            report.errors.append(f"{name}: perfkit tune exited {proc.rc}: {proc.stderr.strip()[-300:]}")
            continue
        report.results[name] = {**json.loads(tables[-1].read_text()), "wall_s": proc.wall_s}
    report.results["verdicts"] = verdicts(report.results)
    return report


def verdicts(results: dict[str, Any]) -> dict[str, Any]:
    errors = [abs(row["error"]) for name, r in results.items() if name != "verdicts" for row in r["tried"]
              if row.get("error") is not None]
    out: dict[str, Any] = {"predictions": len(errors),
                           "within_error": sum(e <= TARGET_ERROR for e in errors) if errors else None}
    two = results.get("2w")
    if two:
        tuned = next((row for row in two["tried"] if two["tuned"] in row["run_ids"].split()), None)
        out["2w tuned_vs_single"] = tuned["vs_baseline"] if tuned else None
        out["2w meets_target"] = None if tuned is None else tuned["vs_baseline"] >= TARGET_TUNED_2W
    return out


def table(report: Report) -> str:
    rows = []
    for name, r in report.results.items():
        if name == "verdicts":
            continue
        for row in r["tried"]:
            span = f" ({fmt(row['measured_lo'])}–{fmt(row['measured_hi'])})" if row["runs"] > 1 else ""
            rows.append([name, row["change"], row["runs"], fmt(row["predicted_speedup"], ".2f", "-"),
                         fmt(row["measured_speedup"]) + span, fmt(row["error"], "+.0%", "-"),
                         fmt(row["vs_baseline"]), row["outcome"]])
    head = ["config", "change", "N", "predicted", "measured (range)", "error", "x single", "outcome"]
    v = report.results["verdicts"]
    notes = [f"{v['within_error']} of {v['predictions']} predictions within {TARGET_ERROR:.0%} of their run"
             if v["predictions"] else "no prediction was measured"]
    if "2w meets_target" in v:
        notes.append(f"2 local workers tuned: {fmt(v['2w tuned_vs_single'])}x single "
                     f"({'meets' if v['2w meets_target'] else 'misses'} >= {TARGET_TUNED_2W})")
    return f"{heading(report)}\n\n{markdown_table(head, rows, right=(2, 3, 4, 5, 6))}\n\n" + "; ".join(notes) + "."


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_repeats=2)
    p.add_argument("--configs", default="2w,4w,blog", help=f"comma-separated, of {', '.join(CONFIGS)}")
    p.add_argument("--try", dest="try_", type=int, default=3, help="pieces of advice to try")
    args = p.parse_args(argv)
    args.configs = choice_list("--configs", args.configs, list(CONFIGS))
    args = finish_args(args)
    if args.smoke:
        args.configs, args.try_ = ["2w"], 1
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
