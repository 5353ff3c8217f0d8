"""Benchmark: the scaling forecast calibrated out of sample. For each configuration (a scale model of
emulated hosts: cores per worker, strong or weak scaling), each round: a ``perfkit sweep`` over the fitted
counts, whose forecast at twice the largest count is read and kept first, then that count run for real
(``perfkit run --mode multi --cluster`` of as many emulated hosts) and measured as the forecast measures
(``analysis/scaling_measure.py``: the steady epoch without perfkit's trace window or a restart's first
step). Reports each forecast's error and whether its 90% interval held the measured epoch. Goals: mean
|error| <= 10%, and the intervals holding the measured epoch in >= 90% of the cases.

    perfkit bench scaling --repeats 3
    perfkit bench scaling --cases strong-0.25,weak-0.25 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perfkit.bench._common import (PERFKIT, Report, conclude, env_with_repo, finish_args, fmt, heading, make_parser,
                                   markdown_table, progress, run_measured)
from perfkit.bench._runs import runs_dir
from perfkit.trainer.rounds import turned

NAME = "scaling"
TARGET_ERROR = 0.10
TARGET_COVERAGE = 0.90


@dataclass(frozen=True)
class Case:
    scaling: str
    cores: float  # per worker (one emulated host each)
    fit: tuple[int, ...]
    check: int
    batch: int  # the global batch of one worker
    players: tuple[int, int]  # training, validation


# 19 steps an epoch at every count (weak: 40,000 players over 8 x 256), so the steady epoch keeps untraced
# steps beside the trace window at the checked count too.
CASES = {
    "strong-0.25": Case("strong", 0.25, (1, 2, 4), 8, 1024, (20_000, 5_000)),
    "strong-0.125": Case("strong", 0.125, (1, 2, 4), 8, 512, (10_000, 2_500)),
    "weak-0.25": Case("weak", 0.25, (1, 2, 4), 8, 256, (40_000, 4_000)),
}
SMOKE = Case("strong", 0.5, (1, 2), 4, 256, (1024, 256))


def _flags(case: Case, preset: str) -> list[str]:
    return ["--preset", preset, "--epochs", "2", "--batch-size", str(case.batch), "--train-players",
            str(case.players[0]), "--test-players", str(case.players[1])]


def forecast_first(case: Case, preset: str, results: Path, timeout: float) -> dict[str, Any]:
    """The sweep over the fitted counts and its forecast at the checked count, before that count runs."""
    cmd = [*PERFKIT, "sweep", "--workers", ",".join(map(str, case.fit)), "--cores-per-worker", f"{case.cores:g}",
           "--scaling", case.scaling, *_flags(case, preset), "--forecast", str(case.check), "--results-dir",
           str(results), "--quiet", "--no-html", "--format", "json"]
    proc = run_measured(cmd, timeout * (len(case.fit) + 1), env=env_with_repo())
    if not proc.ok:
        return {"failure": f"perfkit sweep: {proc.error()}"}
    doc = json.loads(proc.stdout)
    row = next((r for r in doc["forecast"] if r["workers"] == case.check), None)
    loo = [r for r in doc["model"] if r["formula"] == "loo"]
    if row is None:
        return {"failure": f"no forecast at {case.check}: {'; '.join(doc['notes'])}"}
    return {"predicted_s": row["steady_epoch_s"], "lo_s": row["epoch_lo_s"], "hi_s": row["epoch_hi_s"],
            "supported": row["supported"], "support_note": row["support_note"], "sweep_s": proc.wall_s,
            "loo": [{"term": r["term"], "error": r["value"]} for r in loo]}


def cluster_file(case: Case, path: Path) -> Path:
    """``case.check`` emulated hosts of ``case.cores`` cores, one worker each: the sweep's scale model."""
    hosts = "".join(f'[[hosts]]\nname = "h{i}"\naddress = "127.0.0.{i + 1}"\ncores = {case.cores}\nworkers = 1\n'
                    f"base_port = 20000\n\n" for i in range(case.check))
    path.write_text(hosts, encoding="utf-8")
    return path


def run_check(case: Case, preset: str, results: Path, run_id: str, timeout: float) -> dict[str, Any]:
    """The checked count run for real, measured as the forecast measures."""
    from perfkit.analysis.scaling_measure import steady_run
    from perfkit.results import RunRecord

    batch = case.batch * (case.check if case.scaling == "weak" else 1)
    flags = [*_flags(case, preset)]
    flags[flags.index("--batch-size") + 1] = str(batch)
    cmd = [*PERFKIT, "run", "--mode", "multi", "--cluster", str(cluster_file(case, results / f"{run_id}.toml")),
           *flags, "--results-dir", str(results), "--run-id", run_id, "--quiet"]
    proc = run_measured(cmd, timeout, env=env_with_repo())
    if not proc.ok:
        return {"failure": f"perfkit run: {proc.error()}"}
    record = RunRecord.load(results / run_id)
    clean = steady_run(record)
    steps = float(record.run.plan().get("steps_per_epoch") or math.nan)
    return {"measured_s": steps * clean.step_s + clean.val_s, "step_s": clean.step_s, "val_s": clean.val_s,
            "steps": steps, "restarts": len(record.run.restarts), "run_s": proc.wall_s}


def measure(args: argparse.Namespace) -> Report:
    cases = {"smoke": SMOKE} if args.smoke else {k: CASES[k] for k in args.cases}
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats,
                           "cases": {k: asdict(c) for k, c in cases.items()}})
    report.targets = {"mean_abs_error_max": TARGET_ERROR, "coverage_min": TARGET_COVERAGE}
    results = runs_dir(args.results_root, NAME, args.stamp)
    rows = []
    for r in range(1, args.repeats + 1):
        for name in turned(list(cases), r - 1):
            case = cases[name]
            progress(f"round {r}: {name}: sweep {','.join(map(str, case.fit))}, then {case.check} workers")
            where = results / f"r{r}-{name}"
            where.mkdir(parents=True, exist_ok=True)
            (where / "datasets").symlink_to((results / "datasets").resolve(), target_is_directory=True)
            row = {"case": name, "round": r, **forecast_first(case, args.preset, where, args.timeout)}
            if "failure" not in row:
                row.update(run_check(case, args.preset, where, f"check-r{r}-{name}", args.timeout))
            rows.append(_judged(row))
            if "failure" in row:
                report.errors.append(f"{name} round {r}: {row['failure']}")
    report.results = {"rows": rows, **summary(rows)}
    return report


def _judged(row: dict[str, Any]) -> dict[str, Any]:
    m, p = row.get("measured_s"), row.get("predicted_s")
    ok = m is not None and p is not None and math.isfinite(m) and p > 0
    row["error"] = m / p - 1 if ok else None
    lo, hi = row.get("lo_s"), row.get("hi_s")
    row["held"] = bool(lo <= m <= hi) if ok and lo is not None and hi is not None else None
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean |error| over every forecast checked; coverage over those that claimed an interval."""
    errors = [abs(r["error"]) for r in rows if isinstance(r.get("error"), float)]
    held = [r["held"] for r in rows if r.get("held") is not None]
    mean = sum(errors) / len(errors) if errors else None
    coverage = sum(held) / len(held) if held else None
    return {"n": len(errors), "n_intervals": len(held), "mean_abs_error": mean, "coverage": coverage,
            "meets_error": None if mean is None else mean <= TARGET_ERROR,
            "meets_coverage": None if coverage is None else coverage >= TARGET_COVERAGE}


def table(report: Report) -> str:
    r = report.results
    head = ["case", "round", "predicted s (90% interval)", "measured s", "error", "interval held"]
    body = [[x["case"], x["round"], f"{fmt(x.get('predicted_s'))} ({fmt(x.get('lo_s'), missing='-')}–"
             f"{fmt(x.get('hi_s'), missing='-')})", fmt(x.get("measured_s")),
             fmt(x["error"], "+.1%") if isinstance(x.get("error"), float) else "failed",
             {True: "yes", False: "no", None: "no interval"}[x.get("held")]] for x in r.get("rows", [])]
    verdict = (f"mean |error| {fmt(r.get('mean_abs_error'), '.1%')} over {r.get('n')} (goal <= {TARGET_ERROR:.0%}); "
               f"intervals held {fmt(r.get('coverage'), '.0%', missing='-')} of {r.get('n_intervals')} (goal >= "
               f"{TARGET_COVERAGE:.0%})")
    return f"{heading(report)}\n\n{markdown_table(head, body, right=(1, 2, 3, 4))}\n\n{verdict}"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_repeats=3)
    p.add_argument("--cases", type=lambda s: [c.strip() for c in s.split(",")], default=list(CASES),
                   help=f"configurations, comma-separated: {', '.join(CASES)}")
    args = finish_args(p.parse_args(argv))
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        raise SystemExit(f"--cases: {unknown[0]!r} is not a case; choose from {', '.join(CASES)}")
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
