"""Start-up: from the command to the first training step, one process against N local workers.

Interleaved round by round: ``perfkit run --mode single``, then ``--mode multi --workers N`` for each N in
``--workers`` (default 4,8) (with ``--exec``, each N again with every worker importing TensorFlow itself
instead of being forked from the fork server, ``PERFKIT_WORKER_START=exec``), and with ``--cluster FILE``
that emulated cluster too (its CPU budgets apply
from training: ``docs/multi-worker.md``), each one epoch of the tiny preset without a trace window (nothing
after the first step is measured). Figure: ``perfkit analyze``'s "command to first step" (the command's
start to the earliest first step of any worker), its ratio to the single run of the same round, and the CPU
seconds the whole command used (the launcher and every worker, from ``wait4``), which says whether the
time is work (N TensorFlow imports, servers, graph building) or waiting. Goals (issue 31): 4 workers
<= 1.7x and 8 workers <= 2.5x the single run's.

    python -m benchmarks startup --repeats 5
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    ratios,
    stats,
)
from benchmarks._runs import Training, perfkit_run, runs_dir
from perfkit.trainer.forkserver import START_VAR

NAME = "startup"
EXEC = " (exec)"
TARGETS = {4: 1.7, 8: 2.5}  # x the single run's command to first step


def arms(args: argparse.Namespace) -> dict[str, Callable[[int], Training]]:
    runs = runs_dir(args.results_root, NAME, args.stamp)
    base = ["--preset", "tiny", "--epochs", "1", "--no-profile"]

    def arm(label: str, extra: list[str], env: dict[str, str] | None = None) -> Callable[[int], Training]:
        return lambda i: perfkit_run(f"{label} #{i + 1}", [*extra, *base], runs, args.timeout, env)

    out = {"single": arm("single", ["--mode", "single"])}
    for n in args.workers:
        out[f"{n} workers"] = arm(f"{n} workers", ["--mode", "multi", "--workers", str(n)])
        if args.exec:  # the same launch with every worker importing TensorFlow itself: what the fork server saves
            out[f"{n} workers{EXEC}"] = arm(f"{n} workers{EXEC}", ["--mode", "multi", "--workers", str(n)],
                                            {START_VAR: "exec"})
    if args.cluster:
        out[f"emulated {args.cluster.stem}"] = arm(f"emulated {args.cluster.stem}",
                                                   ["--mode", "multi", "--cluster", str(args.cluster)])
    return out


def measure(args: argparse.Namespace) -> Report:
    report = Report(NAME, {"repeats": args.repeats, "workers": args.workers, "exec": args.exec,
                           "cluster": str(args.cluster) if args.cluster else None})
    report.targets = {f"{n}w_ratio_max": TARGETS[n] for n in args.workers if n in TARGETS}
    got = interleave(arms(args), args.repeats, progress)
    single = [t.extra.get("startup_s") for t in got["single"]]
    results: dict[str, Any] = {}
    for name, tr in got.items():
        results[name] = {"startup_s": stats(t.extra.get("startup_s") for t in tr),
                         "cpu_s": stats(t.extra.get("cpu_s") for t in tr),
                         "ratio_to_single": ratios([t.extra.get("startup_s") for t in tr], single),
                         "phases": _phases(tr), "runs": [t.to_dict() for t in tr]}
        report.errors += [f"{t.label}: {t.error}" for t in tr if t.error]
    results["meets_target"] = {
        f"{n} workers": (None if results[f"{n} workers"]["ratio_to_single"]["median"] is None
                         else results[f"{n} workers"]["ratio_to_single"]["median"] <= TARGETS[n])
        for n in args.workers if n in TARGETS}
    report.results = results
    return report


def _phases(runs: list[Training]) -> list[dict[str, Any]]:
    """Where a worker's start-up went (``analysis/startup.py``), median over the runs that completed."""
    from perfkit.analysis.startup import phase_summary, startup_phases
    from perfkit.results import RunRecord

    frames = [startup_phases(RunRecord.load(Path(t.run_dir))) for t in runs if t.run_dir and not t.error]
    return phase_summary(frames).to_dict("records")


def phase_table(report: Report) -> str:
    """Phases as rows, launches as columns: a worker's median wall seconds and its CPU seconds."""
    arms = {name: {p["phase"]: p for p in v.get("phases") or []} for name, v in report.results.items()
            if name != "meets_target" and v.get("phases")}
    order = list(dict.fromkeys(ph for a in arms.values() for ph in a))
    rows = [[ph, *(_cell(a.get(ph)) for a in arms.values())] for ph in order]
    head = ["phase of a worker's start-up", *(f"{name}: s (CPU s)" for name in arms)]
    return markdown_table(head, rows, right=tuple(range(1, len(arms) + 1))) if rows else ""


def _cell(p: dict[str, Any] | None) -> str:
    if not p:
        return "-"
    cpu = p.get("cpu_s")
    return f"{p['wall_s']:.2f}" + (f" ({cpu:.2f})" if isinstance(cpu, float) and cpu == cpu else "")


def table(report: Report) -> str:
    r = report.results
    rows = [[name, fmt_range(v["startup_s"], ".1f"),
             "1 (baseline)" if name == "single" else fmt_range(v["ratio_to_single"], ".2f"),
             fmt_range(v["cpu_s"], ".1f"), _target(name)]
            for name, v in r.items() if name != "meets_target"]
    head = ["launch", "command to first step s", "x single", "CPU s (all processes)", "goal"]
    met = [f"{name}: {'met' if ok else 'missed' if ok is False else 'not measured'}"
           for name, ok in r["meets_target"].items()]
    phases = phase_table(report)
    return (f"{heading(report)}\n\n{markdown_table(head, rows, right=(1, 2, 3))}\n\n"
            + ("; ".join(met) + "." if met else "")
            + (f"\n\nWhere each worker's start-up went (median worker, median run):\n\n{phases}" if phases else ""))


def _target(name: str) -> str:
    n = int(name.split()[0]) if name.split()[0].isdigit() and not name.endswith(EXEC) else None
    return f"<= {TARGETS[n]}x" if n in TARGETS else ""


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_preset=None, default_repeats=5)
    p.add_argument("--workers", default="4,8", help="comma-separated worker counts (each divides the tiny batch)")
    p.add_argument("--cluster", type=Path, default=None, help="an emulated cluster file to start as well")
    p.add_argument("--exec", action="store_true",
                   help=f"also start each worker count with {START_VAR}=exec (every worker imports TensorFlow)")
    args = p.parse_args(argv)
    try:
        args.workers = sorted({int(w) for w in str(args.workers).split(",") if w.strip()})
    except ValueError:
        raise SystemExit(f"--workers: {args.workers!r} is not a comma-separated list of counts, e.g. 4,8") from None
    if not args.workers or min(args.workers) < 2:
        raise SystemExit("--workers: give worker counts >= 2, e.g. 4,8")
    if args.cluster is not None and not args.cluster.is_file():
        raise SystemExit(f"--cluster: {args.cluster}: no such file")
    if args.timeout is None:
        args.timeout = 600.0  # one tiny epoch; a run that never reaches its first step is cut off
    args = finish_args(args)
    if args.smoke:
        args.workers, args.cluster = [2], None
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
