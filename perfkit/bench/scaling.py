"""Benchmark: the scaling forecast checked. One interleaved ``perfkit sweep`` of a scale model (hosts of
``--cores-per-worker`` cores, default this machine's cores / 8) over 1, 2, 4 and 8 workers; the step-time
model (``analysis/scaling_forecast.py``) is fitted on 1, 2 and 4 only and its 8-worker steady epoch is set
against the measured one. Target: within 15%. ``--smoke`` fits on 1 and 2 and checks 4 (tiny runs).

    python -m perfkit.bench scaling --preset quick --repeats 2
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from perfkit.bench._common import (PERFKIT, Report, conclude, env_with_repo, finish_args, fmt, heading, make_parser,
                                   markdown_table, progress, run_measured, smoke_size)
from perfkit.bench._runs import runs_dir

NAME = "scaling"
TARGET_ERROR = 0.15


def measure(args: argparse.Namespace) -> Report:
    fit_on, check = ((1, 2), 4) if args.smoke else ((1, 2, 4), 8)
    cores = args.cores_per_worker or _machine_cores() / check
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats, "fit_on": list(fit_on), "checked": check,
                           "cores_per_worker": cores})
    report.targets = {"epoch_error_max": TARGET_ERROR}
    results = runs_dir(args.results_root, NAME, args.stamp)
    counts = ",".join(map(str, (*fit_on, check)))
    progress(f"perfkit sweep --workers {counts} --cores-per-worker {cores:g}")
    proc = run_measured([*PERFKIT, "sweep", "--workers", counts, "--cores-per-worker", f"{cores:g}", "--preset",
                         args.preset, "--repeats", str(args.repeats), *smoke_size(args), "--results-dir",
                         str(results), "--quiet", "--no-html"],
                        args.timeout * args.repeats * (len(fit_on) + 1), env=env_with_repo())
    sweeps = sorted(results.glob("sweep-*"))
    if not sweeps:
        report.errors.append(f"perfkit sweep exited {proc.rc}: {proc.stderr.strip()[-300:]}")
        return report
    if proc.rc != 0:
        report.errors.append(f"perfkit sweep exited {proc.rc} (its finished runs are used): "
                             f"{proc.stderr.strip()[-300:]}")
    report.results = {"sweep": str(sweeps[-1]), "wall_s": proc.wall_s, **checked(sweeps[-1], fit_on, check)}
    return report


def checked(sweep_dir: Path, fit_on: tuple[int, ...], check: int) -> dict[str, Any]:
    """The model fitted on ``fit_on``'s runs only, its prediction for ``check`` against the measured runs."""
    from perfkit.analysis.scaling import load_sweep, run_table
    from perfkit.analysis.scaling_forecast import forecast

    record = load_sweep(sweep_dir)
    runs, notes = run_table(record, sweep_dir.parent)
    fitted = runs[runs["workers"].isin(fit_on)]
    fc, terms, fc_notes = forecast(fitted, record, [check])
    measured = runs[(runs["workers"] == check) & (runs["role"] == "workers")]["steady_epoch_s"].astype(float)
    pred = fc.iloc[0].to_dict() if not fc.empty else {}
    m = float(measured.mean()) if len(measured) else None
    p = pred.get("steady_epoch_s")
    error = m / p - 1 if m is not None and p else None
    return {"predicted_epoch_s": p, "interval_s": [pred.get("epoch_lo_s"), pred.get("epoch_hi_s")],
            "measured_epoch_s": m, "measured_n": int(len(measured)), "measured_values": measured.tolist(),
            "error": error, "within_interval": (None if m is None or not pred else
                                                bool(pred["epoch_lo_s"] <= m <= pred["epoch_hi_s"])),
            "meets_target": None if error is None else abs(error) <= TARGET_ERROR,
            "terms": terms.to_dict(orient="records"), "notes": notes + fc_notes}


def _machine_cores() -> float:
    from perfkit.trainer.hosts.cpubudget import available_cores

    return float(len(available_cores()))


def table(report: Report) -> str:
    r, p = report.results, report.params
    if "predicted_epoch_s" not in r:
        return heading(report) + "\n\nno sweep to check."
    lo, hi = r["interval_s"]
    row = [f"{p['checked']} (fit on {', '.join(map(str, p['fit_on']))})", f"{p['cores_per_worker']:g}",
           f"{fmt(r['predicted_epoch_s'])} ({fmt(lo)}–{fmt(hi)})", fmt(r["measured_epoch_s"]), r["measured_n"],
           fmt(r["error"], "+.1%"), {True: "meets", False: "misses", None: "not measured"}[r["meets_target"]]]
    head = ["workers", "cores each", "predicted steady epoch s (interval)", "measured s", "N", "error",
            f"target ±{TARGET_ERROR:.0%}"]
    return f"{heading(report)}\n\n{markdown_table(head, [row], right=(1, 2, 3, 4, 5))}"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_repeats=2)
    p.add_argument("--cores-per-worker", type=float, default=None, help="each emulated host's cores "
                   "(default: this machine's cores / the largest count)")
    args = finish_args(p.parse_args(argv))
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
