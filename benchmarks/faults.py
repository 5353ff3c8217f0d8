"""Faults a real cluster has, injected into real runs: how fast perfkit names them, and whether it names the
right worker or link (target: the stopped or stuck worker named first, as the cause, within 60 s at the
quick preset; every fault named right; nothing recorded lost).

The trials are ``perfkit check faults``' own (``perfkit/studies/faults.py`` says what each fault is and
what counts as named right and kept); this benchmark runs them in rounds at a preset's size and writes the
benchmark's JSON and Markdown table.

    python -m benchmarks faults --repeats 5            # 6 faults x 5 = 30 trials (link and disk: as root)
    python -m benchmarks faults --faults stop,sleep --smoke
"""

from __future__ import annotations

import sys
from dataclasses import asdict

from benchmarks._common import (
    Report,
    choice_list,
    conclude,
    finish_args,
    heading,
    make_parser,
    markdown_table,
    progress,
    smoke_size,
)
from benchmarks._runs import runs_dir
from perfkit.studies.faults import FAULTS, FaultSpec, Trial, summarise, trial

NAME = "faults"
TARGET_S = 60.0
SMOKE_HANG_S = 10.0  # the auto limit is unit-tested (tests/unit/test_hang.py); the smoke checks who is named


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
    faults = choice_list("--faults", args.faults, FAULTS)
    args = finish_args(args)
    if args.smoke:  # tiny runs of 4 steps an epoch: inject in the second epoch, long before the last
        args.epochs, args.at_step, args.hang_timeout = 30, 1, f"{SMOKE_HANG_S:g}"
    root = runs_dir(args.results_root, NAME, args.stamp)
    sizes = dict(zip(smoke_size(args)[::2], (int(v) for v in smoke_size(args)[1::2])))
    spec = FaultSpec(preset=args.preset, epochs=args.epochs, train_players=sizes.get("--train-players"),
                     test_players=sizes.get("--test-players"), at_epoch=args.at_epoch, at_step=args.at_step,
                     hang_timeout=args.hang_timeout, timeout_s=args.timeout)
    report = Report(NAME, {k: v for k, v in vars(args).items() if k != "results_root"} | {"faults": faults})
    report.targets = {"detect_s": TARGET_S}
    trials: list[Trial] = []
    for i in range(args.repeats):  # faults interleaved round by round
        for fault in faults:
            progress(f"[{i + 1}/{args.repeats}] {fault}")
            t = trial(fault, root, i, spec)
            trials.append(t)
            if not (t.named and t.detect_s is not None and t.detect_s <= TARGET_S):
                report.errors.append(f"{fault} #{i + 1}: named={t.named} in {t.detect_s} s: {t.message}")
    report.results = {"faults": summarise(trials), "trials": [asdict(t) for t in trials]}
    return conclude(report, args, table)


if __name__ == "__main__":
    sys.exit(main())
