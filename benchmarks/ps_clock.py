"""What timing every worker's steps costs under ParameterServerStrategy (target: ratio <= 1.03).

A/B interleaved, same data, model, ``fit`` and cluster (2 workers, one parameter server):
- clock: ``perfkit run --mode ps`` as a user runs it, each worker's steps timed in the step's graph and
  written to a table on the parameter server (perfkit/trainer/worker/ps.py);
- no clock: the same training with no instrument at all (``benchmarks/_ps_bare.py``: perfkit's bare
  training under ParameterServerStrategy), run by ``perfkit launch --mode ps --no-auto-record``.
The figure is the chief's steady epoch (train + validation; median over epochs after the first) and the
ratio clock / no clock, paired by round: the clock's cost with the chief's epoch recorder's, an upper bound
of the clock's own.

    python -m benchmarks ps-clock --preset quick --repeats 3
"""

from __future__ import annotations

import argparse

from benchmarks._common import (
    Report,
    conclude,
    finish_args,
    fmt_range,
    heading,
    interleave,
    make_parser,
    markdown_table,
    progress,
    ratio_sentence,
    ratios,
    smoke_size,
)
from benchmarks._runs import Training, launched_script, perfkit_run, runs_dir, training_summary

NAME = "ps-clock"
TARGET_RATIO = 1.03


def measure(args: argparse.Namespace) -> Report:
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats, "workers": 2, "ps": 1})
    report.targets = {"steady_epoch_ratio_max": TARGET_RATIO}
    runs = runs_dir(args.results_root, NAME, args.stamp)
    common = ["--mode", "ps", "--workers", "2", "--preset", args.preset, *smoke_size(args)]
    bare = ["--preset", args.preset, "--cache-dir", str(runs / "datasets"), *smoke_size(args)]
    launch = ["--mode", "ps", "--workers", "2", "--no-auto-record", "--no-profile"]
    arms = {
        "clock": lambda i: perfkit_run(f"clock #{i + 1}", common, runs, args.timeout),
        "no clock": lambda i: launched_script(f"no clock #{i + 1}", launch, "benchmarks._ps_bare", bare, runs,
                                              args.timeout),
    }
    got: dict[str, list[Training]] = interleave(arms, args.repeats, progress)
    report.results = {name: training_summary(tr) for name, tr in got.items()}
    report.results["ratio"] = {"steady_epoch": ratios([t.steady_epoch_s for t in got["clock"]],
                                                      [t.steady_epoch_s for t in got["no clock"]])}
    for tr in got.values():
        report.errors += [f"{t.label}: {t.error}" for t in tr if t.error]
    med = report.results["ratio"]["steady_epoch"]["median"]
    report.results["meets_target"] = None if med is None else med <= TARGET_RATIO
    return report


def table(report: Report) -> str:
    r = report.results
    rows = [[arm, fmt_range(r[arm]["steady_epoch_s"]), fmt_range(r[arm]["wall_s"], ".1f")]
            for arm in ("clock", "no clock")]
    ratio = r["ratio"]["steady_epoch"]
    rows.append(["clock / no clock", fmt_range(ratio, ".3f"), ""])
    return (f"{heading(report)}\n\n{markdown_table(['side', 'steady epoch s', 'whole command s'], rows, right=(1, 2))}"
            "\n\n" + ratio_sentence("Steady epoch-time", ratio, r["meets_target"], TARGET_RATIO))


def main(argv: list[str] | None = None) -> int:
    args = finish_args(make_parser(NAME, __doc__).parse_args(argv))
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
