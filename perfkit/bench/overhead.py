"""Benchmark 1: perfkit's instrumentation overhead on the single-mode workload (target: ratio <= 1.03).

A/B interleaved, same data, same pipeline, model and fit:
- bare: ``python -m perfkit.bench.bare_workload`` (no CPU sampler, no step recorder, no scalars, no trace);
- instrumented: ``perfkit run --mode single --sample-interval 0.5 --profile-steps A-B``, A-B being a
  10-step TF profiler window early in epoch 2 (what ``auto`` picks), everything recorded.
Epoch time on both sides is Keras' epoch begin -> epoch end (training, validation and every epoch-end
hook, so a trace being written out counts); the figure is the steady epoch time (median over epochs
after the first) and the ratio instrumented / bare, paired by round.

    python -m perfkit.bench overhead --preset quick --repeats 3
"""

from __future__ import annotations

import argparse

from perfkit.bench._common import (SMOKE_PLAYERS, Report, conclude, finish_args, fmt_range, heading, interleave,
                                    make_parser, markdown_table, progress, ratio_sentence, ratios, smoke_size)
from perfkit.bench._runs import Training, perfkit_run, runs_dir, script_run, training_summary
from perfkit.config import get_preset
from perfkit.profiler.tracewindow import resolve

NAME = "overhead"
TARGET_RATIO = 1.03
SAMPLE_INTERVAL_S = 0.5


def profile_window(preset: str, train_players: int | None = None) -> str:
    """The window ``--profile-steps auto`` picks for this preset, written out so both arms name the same."""
    p = get_preset(preset)
    window = resolve("auto", (train_players or p.train_players) // p.batch_size, p.epochs)
    assert window is not None  # "auto" always places a window
    return f"{window.first}-{window.last}"


def measure(args: argparse.Namespace) -> Report:
    sizes = smoke_size(args)  # both sides train the same (smaller) data under --smoke
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats, "sample_interval_s": SAMPLE_INTERVAL_S,
                           "profile_steps": profile_window(args.preset, SMOKE_PLAYERS[0] if sizes else None)})
    report.targets = {"steady_epoch_ratio_max": TARGET_RATIO}
    runs = runs_dir(args.results_root, NAME, args.stamp)
    cache = str(runs / "datasets")
    instrumented = ["--mode", "single", "--preset", args.preset, "--sample-interval", str(SAMPLE_INTERVAL_S),
                    "--profile-steps", report.params["profile_steps"], *sizes]
    arms = {
        "bare": lambda i: script_run(f"bare #{i + 1}", "perfkit.bench.bare_workload",
                                     ["--preset", args.preset, "--cache-dir", cache, *sizes], args.timeout),
        "instrumented": lambda i: perfkit_run(f"instrumented #{i + 1}", instrumented, runs, args.timeout),
    }
    got: dict[str, list[Training]] = interleave(arms, args.repeats, progress)
    report.results = {name: training_summary(tr) for name, tr in got.items()}
    def ratio(key: str) -> dict[str, object]:  # instrumented / bare, paired by round
        return ratios([getattr(t, key) for t in got["instrumented"]], [getattr(t, key) for t in got["bare"]])

    report.results["ratio"] = {"steady_epoch_wall": ratio("steady_epoch_wall_s"),
                               "steady_epoch_train_plus_val": ratio("steady_epoch_s"),
                               "steady_samples_per_s": ratio("steady_samples_per_s"), "process_wall": ratio("wall_s")}
    for tr in got.values():
        report.errors += [f"{t.label}: {t.error}" for t in tr if t.error]
    med = report.results["ratio"]["steady_epoch_wall"]["median"]
    report.results["meets_target"] = None if med is None else med <= TARGET_RATIO
    return report


def table(report: Report) -> str:
    r = report.results
    rows = [
        [arm, fmt_range(r[arm]["steady_epoch_wall_s"]), fmt_range(r[arm]["steady_samples_per_s"], ",.0f"),
         fmt_range(r[arm]["wall_s"], ".1f")] for arm in ("bare", "instrumented")
    ]
    ratio = r["ratio"]["steady_epoch_wall"]
    rows.append(["instrumented / bare", fmt_range(ratio, ".3f"), fmt_range(r["ratio"]["steady_samples_per_s"], ".3f"),
                 fmt_range(r["ratio"]["process_wall"], ".3f")])
    head = ["side", "steady epoch s (begin to end)", "samples/s", "whole command s"]
    return (f"{heading(report)}\n\n{markdown_table(head, rows, right=(1, 2, 3))}\n\n"
            + ratio_sentence("Steady epoch-time", ratio, r["meets_target"], TARGET_RATIO))


def main(argv: list[str] | None = None) -> int:
    args = finish_args(make_parser(NAME, __doc__).parse_args(argv))
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
