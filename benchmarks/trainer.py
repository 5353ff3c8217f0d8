"""Benchmark 2: perfkit's trainer against the article's own script (target: ratio >= 1.0, ideally >= 1.15).

A/B interleaved on the same cached data and the same model:
- article: ``python -m benchmarks.article_script`` (get_strategy / create_dataset / ``model.fit`` with
  steps_per_epoch and class_weight={1:4,0:1}, batch 1024 from the preset, TensorFlow's default threads);
- perfkit: ``perfkit run --mode single`` exactly as a user runs it (sampler, step recorder and the auto
  profiler window included).
Figure: steady training samples/s (training samples / training seconds, median over epochs after the
first) and the ratio perfkit / article, paired by round. Then each side's achieved FLOP/s (the model's
analytic training FLOPs per sample, see ``bench.flops``, times samples/s) against this machine's measured
dense float32 matmul FLOP/s (best of N with TensorFlow, in its own process between the trainings).

    python -m benchmarks trainer --preset quick --repeats 3
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from benchmarks._common import (
    VERDICT_WORD,
    Report,
    conclude,
    env_with_repo,
    finish_args,
    fmt,
    fmt_range,
    heading,
    interleave,
    make_parser,
    markdown_table,
    progress,
    ratios,
    run_measured,
    smoke_size,
    stats,
)
from benchmarks._runs import perfkit_run, runs_dir, script_json, script_run, training_summary
from benchmarks.flops import forward_flops_per_sample, train_flops_per_sample

NAME = "trainer"
TARGET_RATIO, STRETCH_RATIO = 1.0, 1.15


def matmul_flops(size: int, repeats: int, timeout: float) -> dict[str, Any]:
    proc = run_measured([sys.executable, "-m", "benchmarks.flops", "--size", str(size), "--repeats", str(repeats)],
                        timeout, env=env_with_repo())
    got = script_json(proc)
    if not proc.ok or got is None:
        return {"error": proc.error() or "benchmarks.flops printed no result"}
    return got["matmul"]


def measure(args: argparse.Namespace) -> Report:
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats, "matmul_size": args.matmul_size,
                           "matmul_repeats": args.matmul_repeats})
    report.targets = {"samples_per_s_ratio_min": TARGET_RATIO, "samples_per_s_ratio_stretch": STRETCH_RATIO}
    runs = runs_dir(args.results_root, NAME, args.stamp)
    cache = str(runs / "datasets")
    sizes = smoke_size(args)  # both sides train the same (smaller) data under --smoke
    arms = {
        "article": lambda i: script_run(f"article #{i + 1}", "benchmarks.article_script",
                                        ["--preset", args.preset, "--cache-dir", cache, *sizes], args.timeout),
        "perfkit": lambda i: perfkit_run(f"perfkit #{i + 1}", ["--mode", "single", "--preset", args.preset, *sizes],
                                         runs, args.timeout),
    }
    got = interleave(arms, args.repeats, progress)
    report.results = {name: training_summary(tr) for name, tr in got.items()}
    rate = {arm: [t.steady_samples_per_s for t in got[arm]] for arm in got}
    report.results["ratio"] = {"steady_samples_per_s": ratios(rate["perfkit"], rate["article"])}
    progress("dense matmul FLOP/s")
    report.results["flops"] = flops_figures(rate, matmul_flops(args.matmul_size, args.matmul_repeats, args.timeout))
    for tr in got.values():
        report.errors += [f"{t.label}: {t.error}" for t in tr if t.error]
    if "error" in report.results["flops"]["matmul"]:
        report.errors.append(f"matmul: {report.results['flops']['matmul']['error']}")
    med = report.results["ratio"]["steady_samples_per_s"]["median"]
    report.results["meets_target"] = None if med is None else med >= TARGET_RATIO
    report.results["meets_stretch"] = None if med is None else med >= STRETCH_RATIO
    return report


def flops_figures(rate: dict[str, list[Any]], matmul: dict[str, Any]) -> dict[str, Any]:
    per_sample = train_flops_per_sample()
    peak = matmul.get("flop_per_s")
    out: dict[str, Any] = {"train_flops_per_sample": per_sample, "forward_flops_per_sample":
                           forward_flops_per_sample(7, 18), "formula": "bench/flops.py docstring", "matmul": matmul}
    for arm, values in rate.items():
        achieved = stats(v * per_sample if v is not None else None for v in values)
        share = stats(v * per_sample / peak if v is not None and peak else None for v in values)
        out[arm] = {"achieved_flop_per_s": achieved, "share_of_matmul": share}
    return out


def table(report: Report) -> str:
    r = report.results
    fl = r["flops"]
    rows = []
    for arm in ("article", "perfkit"):
        rows.append([arm, fmt_range(r[arm]["steady_samples_per_s"], ",.0f"), fmt_range(r[arm]["steady_epoch_s"]),
                     fmt_range(_scaled(fl[arm]["achieved_flop_per_s"], 1e-9), ".1f"),
                     fmt_range(_scaled(fl[arm]["share_of_matmul"], 100), ".0f"),
                     fmt_range(r[arm]["val_accuracy"], ".4f")])
    ratio = r["ratio"]["steady_samples_per_s"]
    rows.append(["perfkit / article", fmt_range(ratio, ".3f"), "", "", "", ""])
    head = ["side", "samples/s", "steady epoch s", "GFLOP/s", "% of matmul", "val accuracy"]
    mm = fl["matmul"]
    peak = (f"{fmt((mm.get('flop_per_s') or math.nan) / 1e9, '.1f')} GFLOP/s "
            f"({mm.get('size', '?')}^2 float32 matmul, best of {mm.get('repeats', '?')})")
    verdict = VERDICT_WORD
    return (f"{heading(report)}\n\n{markdown_table(head, rows, right=(1, 2, 3, 4, 5))}\n\n"
            f"Samples/s ratio {fmt(ratio['median'], '.3f')}: {verdict[r['meets_target']]} the target >= "
            f"{TARGET_RATIO}, {verdict[r['meets_stretch']]} the stretch >= {STRETCH_RATIO}. Model: "
            f"{fl['train_flops_per_sample'] / 1e6:.2f} MFLOP per training sample; machine: {peak}.")


def _scaled(s: dict[str, Any], factor: float) -> dict[str, Any]:
    return {**s, **{k: (s[k] * factor if s[k] is not None else None) for k in ("median", "min", "max")}}


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__)
    p.add_argument("--matmul-size", type=int, default=2048, help="square matmul size for the machine's FLOP/s")
    p.add_argument("--matmul-repeats", type=int, default=10)
    args = finish_args(p.parse_args(argv))
    if args.smoke:
        args.matmul_size, args.matmul_repeats = 512, 3
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
