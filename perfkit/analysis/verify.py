"""Checking the what-ifs by running them: the configuration that realises "equal workers" (every host at
the budget that gives its workers the median speed) or "placement" (the proposed workers per host at the
budgets the run had) on this machine, and the table of predicted against measured.

A verification run is an ordinary multi run whose run.json carries ``verifies``: the run it checks, what
was predicted (written before it ran), the budgets and placement it was given. Any analysis that holds it pairs the two.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from perfkit.errors import UsageError
from perfkit.results import RunMeta

HELD_WITHIN = 0.10  # |error| at most this: the prediction held
EQUAL_WORKERS, PLACEMENT = "equal workers", "placement"  # the what-ifs a verification runs (``verifies.what``)
VERIFY_COLUMNS = ["run_id", "verified_by", "what", "budgets", "placement", "predicted_epoch_s", "predicted_lo_s",
                  "predicted_hi_s", "measured_epoch_s", "error", "held", "transfer_source", "compute_assumed_s",
                  "compute_measured_s", "predicted_at_realised_s", "error_at_realised"]
REALISED_WITHIN = 0.05  # the verification's compute per step within this of the assumed one: the what-if was realised


def equal_cluster_toml(meta: RunMeta, budgets: dict[str, float], available: float) -> str:
    """The run's emulated cluster with each host at the budget that realises the what-if, as a cluster file
    (cores are this machine's: the budgets are not scaled again when they fit). UsageError when they do
    not fit here."""
    return _cluster_toml(meta, budgets, None, available, "the equal-workers configuration")


def placement_cluster_toml(meta: RunMeta, budgets: dict[str, float], workers: dict[str, int],
                           available: float) -> str:
    """The run's emulated cluster at the budgets it ran with (``budgets``, as applied), with ``workers`` per
    host; a host given none is left out."""
    return _cluster_toml(meta, budgets, workers, available, "the proposed placement")


def _cluster_toml(meta: RunMeta, budgets: dict[str, float], workers: dict[str, int] | None,
                  available: float, what: str) -> str:
    hosts = (meta.cluster.declared or {}).get("hosts") or meta.cluster.hosts
    total = sum(budgets.values())
    if not budgets or total > available + 1e-9:
        need = f"{total:.2f} cores" if budgets else "no budgets"
        raise UsageError(f"--verify: {what} needs {need} ({_text(budgets)}), more than "
                         f"this machine's {available:g}: it cannot be realised here")
    out = []
    for h in hosts:
        n = int(h["workers"]) if workers is None else int(workers.get(h["name"], 0))
        if n == 0:
            continue
        out.append(f'[[hosts]]\nname = "{h["name"]}"\naddress = "{h["address"]}"\ncores = {budgets[h["name"]]:.4f}\n'
                   f'workers = {n}\nbase_port = {int(h["base_port"])}\n')
        link = {k: v for k, v in (h.get("link") or {}).items() if v is not None}
        if link:
            out.append("link = { " + ", ".join(f"{k} = {v:g}" for k, v in link.items()) + " }\n")
    return "".join(out)


def verification_window(steps: pd.DataFrame) -> str:
    """The trace window a verification run gets (``steps``: the predicted run's step records): the last
    10 steps of the first epoch, which steady figures leave out. A prediction is of an untraced steady
    epoch (the trace's own cost taken out), so the epochs it is measured against must hold no window;
    the window still times the verification's compute per step, for ``compute_measured_s``."""
    first = steps[steps["epoch"] == steps["epoch"].min()] if not steps.empty else steps
    per_epoch = int(first.groupby("worker").size().min()) if not first.empty else 0
    if per_epoch < 3:
        return "off"
    return f"{max(2, per_epoch - 10)}-{per_epoch - 1}"


def verification_window_of(run: Path) -> str:
    """``verification_window`` of the predicted run in directory ``run``: what compare --verify and bench
    whatif both give their verification runs."""
    from perfkit.analysis.summary import final_attempt
    from perfkit.results import RunRecord

    return verification_window(final_attempt(RunRecord.load(run).steps))


def proposed_workers(row: Any) -> dict[str, int]:
    """The placement what-if's workers per host, from the analysis row ("a:b" hosts, "4:0" workers)."""
    return dict(zip(str(row.placement_hosts).split(":"), map(int, str(row.placement_proposed).split(":"))))


def _text(budgets: dict[str, float]) -> str:
    return ", ".join(f"{h} {c:.2f}" for h, c in budgets.items())


def prediction(row: Any, what: str = EQUAL_WORKERS, budgets: str | None = None) -> dict[str, Any]:
    """What a verification run records in ``verifies``, from the predicted run's analysis row."""
    if what == PLACEMENT:
        return {"run_id": row.run_id, "what": what, "predicted_epoch_s": float(row.placement_epoch_s),
                "predicted_lo_s": float(row.placement_epoch_lo_s), "predicted_hi_s": float(row.placement_epoch_hi_s),
                "budgets": budgets, "placement": f"{row.placement_proposed} ({row.placement_hosts})",
                "transfer_source": row.equal_transfer_source, "compute_s": float(row.compute_proposed_s),
                "epoch_per_compute": float(row.equal_epoch_per_compute)}
    return {"run_id": row.run_id, "what": what, "predicted_epoch_s": float(row.equal_epoch_s),
            "predicted_lo_s": float(row.equal_epoch_lo_s), "predicted_hi_s": float(row.equal_epoch_hi_s),
            "budgets": row.equal_budgets, "placement": None, "transfer_source": row.equal_transfer_source,
            "compute_s": float(row.equal_compute_s), "epoch_per_compute": float(row.equal_epoch_per_compute)}


def verification_table(metas: dict[str, RunMeta], runs: pd.DataFrame,
                       workers: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per verification run among ``metas`` (run id -> run.json): predicted vs measured, and the
    compute per step its workers took (median over workers of their median, ``workers``: the analysis'
    per-worker table) against what the what-if assumed."""
    rows = []
    steady = runs.set_index("run_id")["steady_epoch_s"] if not runs.empty else pd.Series(dtype=float)
    computed = (workers.groupby("run_id")["compute_median_s"].median()
                if workers is not None and not workers.empty and "compute_median_s" in workers
                else pd.Series(dtype=float))
    for run_id, meta in metas.items():
        v = meta.verifies
        if not v:
            continue
        measured = float(steady.get(run_id, math.nan))
        predicted = float(v.get("predicted_epoch_s", math.nan))
        error = (predicted - measured) / measured if measured and math.isfinite(measured) else math.nan
        rows.append({"run_id": v.get("run_id"), "verified_by": run_id, "what": v.get("what"),
                     "budgets": v.get("budgets"), "placement": v.get("placement"), "predicted_epoch_s": predicted,
                     "predicted_lo_s": v.get("predicted_lo_s"), "predicted_hi_s": v.get("predicted_hi_s"),
                     "measured_epoch_s": measured, "error": error,
                     "held": bool(abs(error) <= HELD_WITHIN) if math.isfinite(error) else None,
                     "transfer_source": v.get("transfer_source"),
                     **at_realised(v, predicted, measured, float(computed.get(run_id, math.nan)))})
    return pd.DataFrame(rows, columns=VERIFY_COLUMNS)


def verification_lines(table: pd.DataFrame) -> list[str]:
    out = []
    for r in table.itertuples(index=False):
        if not math.isfinite(r.measured_epoch_s):
            out.append(f"Verification of {r.run_id}'s {r.what} what-if: {r.verified_by} recorded no steady epoch.")
            continue
        held = ("the prediction held" if r.held else
                f"the prediction did not hold (|error| > {HELD_WITHIN:.0%})")
        placed = f", workers {r.placement}" if isinstance(r.placement, str) and r.placement else ""
        out.append(f"Verified by running it ({r.verified_by}, budgets {r.budgets}{placed}): {r.what} predicted a "
                   f"steady epoch of {r.predicted_epoch_s:.1f} s, measured {r.measured_epoch_s:.1f} s, error "
                   f"{r.error:+.1%}: {held}.{_realised(r)}")
    return out


def _realised(r: Any) -> str:
    """Whether the verification's workers computed as fast as the what-if assumed: CPU budgets are not
    proportional to speed everywhere (bench whatif: a worker at 0.5 core did ~6-17% less work per
    core-second than at 0.7), so a verification can run a different what-if than the one predicted."""
    assumed, measured = r.compute_assumed_s, r.compute_measured_s
    if not (math.isfinite(assumed) and math.isfinite(measured) and assumed > 0):
        return ""
    off = measured / assumed - 1
    text = (f" Its workers computed {measured * 1e3:.0f} ms per step (median worker) against the "
            f"{assumed * 1e3:.0f} ms the what-if assumes ({off:+.0%})")
    if abs(off) <= REALISED_WITHIN:
        return text + "."
    return (text + f": the budgets did not realise that speed. At the speed they did, the model predicts "
            f"{r.predicted_at_realised_s:.1f} s, error {r.error_at_realised:+.1%}.")


def at_realised(v: dict[str, Any], predicted: float, measured: float, computed: float) -> dict[str, float]:
    """The prediction moved to the compute per step the verification's workers really took (the epoch is
    linear in it: ``epoch_per_compute``), and its error: what the model gets wrong once the emulation's own
    error (budgets that gave another speed than assumed) is taken out."""
    assumed = float(v.get("compute_s") or math.nan)
    slope = float(v.get("epoch_per_compute") or math.nan)
    moved = predicted + slope * (computed - assumed)
    error = (moved - measured) / measured if measured and math.isfinite(measured) else math.nan
    return {"compute_assumed_s": assumed, "compute_measured_s": computed, "predicted_at_realised_s": moved,
            "error_at_realised": error}
