"""Checking the what-if by running it: the configuration that realises "equal workers" on this machine,
and the table of predicted against measured.

A verification run is an ordinary multi run whose run.json carries ``verifies``: the run it checks, what
was predicted (written before it ran) and the budgets it was given. Any analysis that holds it pairs the two.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from perfkit.errors import UsageError

HELD_WITHIN = 0.10  # |error| at most this: the prediction held
VERIFY_COLUMNS = ["run_id", "verified_by", "what", "budgets", "predicted_epoch_s", "predicted_lo_s",
                  "predicted_hi_s", "measured_epoch_s", "error", "held", "transfer_source"]


def equal_cluster_toml(meta: dict[str, Any], budgets: dict[str, float], available: float) -> str:
    """The run's emulated cluster with each host at the budget that realises the what-if, as a cluster file
    (cores are this machine's: the budgets are not scaled again when they fit). UsageError when they do
    not fit here."""
    cluster = meta.get("cluster") or {}
    declared = cluster.get("declared") or cluster
    total = sum(budgets.values())
    if not budgets or total > available + 1e-9:
        need = f"{total:.2f} cores" if budgets else "no budgets"
        raise UsageError(f"--verify: the equal-workers configuration needs {need} ({_text(budgets)}), more than "
                         f"this machine's {available:g}: it cannot be realised here")
    out = []
    for h in declared.get("hosts") or []:
        out.append(f'[[hosts]]\nname = "{h["name"]}"\naddress = "{h["address"]}"\ncores = {budgets[h["name"]]:.4f}\n'
                   f'workers = {int(h["workers"])}\nbase_port = {int(h["base_port"])}\n')
        link = {k: v for k, v in (h.get("link") or {}).items() if v is not None}
        if link:
            out.append("link = { " + ", ".join(f"{k} = {v:g}" for k, v in link.items()) + " }\n")
    return "".join(out)


def _text(budgets: dict[str, float]) -> str:
    return ", ".join(f"{h} {c:.2f}" for h, c in budgets.items())


def prediction(row: Any) -> dict[str, Any]:
    """What a verification run records in ``verifies``, from the predicted run's analysis row."""
    return {"run_id": row.run_id, "what": "equal workers", "predicted_epoch_s": float(row.equal_epoch_s),
            "predicted_lo_s": float(row.equal_epoch_lo_s), "predicted_hi_s": float(row.equal_epoch_hi_s),
            "budgets": row.equal_budgets, "transfer_source": row.equal_transfer_source}


def verification_table(metas: dict[str, dict[str, Any]], runs: pd.DataFrame) -> pd.DataFrame:
    """One row per verification run among ``metas`` (run id -> run.json): predicted vs measured."""
    rows = []
    steady = runs.set_index("run_id")["steady_epoch_s"] if not runs.empty else pd.Series(dtype=float)
    for run_id, meta in metas.items():
        v = meta.get("verifies")
        if not isinstance(v, dict):
            continue
        measured = float(steady.get(run_id, math.nan))
        predicted = float(v.get("predicted_epoch_s", math.nan))
        error = (predicted - measured) / measured if measured and math.isfinite(measured) else math.nan
        rows.append({"run_id": v.get("run_id"), "verified_by": run_id, "what": v.get("what"),
                     "budgets": v.get("budgets"), "predicted_epoch_s": predicted,
                     "predicted_lo_s": v.get("predicted_lo_s"), "predicted_hi_s": v.get("predicted_hi_s"),
                     "measured_epoch_s": measured, "error": error,
                     "held": bool(abs(error) <= HELD_WITHIN) if math.isfinite(error) else None,
                     "transfer_source": v.get("transfer_source")})
    return pd.DataFrame(rows, columns=VERIFY_COLUMNS)


def verification_lines(table: pd.DataFrame) -> list[str]:
    out = []
    for r in table.itertuples(index=False):
        if not math.isfinite(r.measured_epoch_s):
            out.append(f"Verification of {r.run_id}'s {r.what} what-if: {r.verified_by} recorded no steady epoch.")
            continue
        held = ("the prediction held" if r.held else
                f"the prediction did not hold (|error| > {HELD_WITHIN:.0%})")
        out.append(f"Verified by running it ({r.verified_by}, budgets {r.budgets}): {r.what} predicted a steady "
                   f"epoch of {r.predicted_epoch_s:.1f} s, measured {r.measured_epoch_s:.1f} s, error "
                   f"{r.error:+.1%}: {held}.")
    return out
