"""The strategies compared: one row per mode (single, multi, ps) from the runs of an analysis.

Each mode's row is its latest run that is not a what-if verification (those re-run a multi cluster at
other budgets and answer another question). Synchronous (multi) and asynchronous (ps) training are set
side by side: the epoch time ratio and the validation gap between them, the figures the verdict's
"did asynchronous training beat synchronous" sentence is made of.
"""

from __future__ import annotations

import math

import pandas as pd

MODES = ("single", "multi", "ps")
MODE_COLUMNS = ["mode", "strategy", "run_id", "workers", "ps", "steady_epoch_s", "steady_samples_per_s",
                "speedup", "efficiency", "step_shares", "min_step_share", "val_accuracy", "val_auc",
                "val_accuracy_gap", "epoch_ratio_vs_multi", "val_accuracy_vs_multi", "val_auc_vs_multi"]


def mode_table(runs: pd.DataFrame, verification_ids: set[str] | frozenset[str] = frozenset()) -> pd.DataFrame:
    """Per mode present, its latest run's figures; ``epoch_ratio_vs_multi`` is the multi run's steady
    epoch over this one's (> 1: faster than synchronous training), the ``*_vs_multi`` gaps this minus multi."""
    if runs.empty:
        return pd.DataFrame(columns=MODE_COLUMNS)
    usable = runs[~runs["run_id"].isin(verification_ids)]
    picked = [usable[usable["mode"] == m].iloc[-1] for m in MODES if (usable["mode"] == m).any()]
    if not picked:
        return pd.DataFrame(columns=MODE_COLUMNS)
    out = pd.DataFrame(picked).reset_index(drop=True)
    multi = out[out["mode"] == "multi"]
    m = multi.iloc[0] if not multi.empty else None
    out["epoch_ratio_vs_multi"] = m["steady_epoch_s"] / out["steady_epoch_s"] if m is not None else math.nan
    for metric in ("val_accuracy", "val_auc"):
        out[f"{metric}_vs_multi"] = out[metric] - m[metric] if m is not None else math.nan
    for col in MODE_COLUMNS:
        if col not in out:
            out[col] = math.nan
    return out[MODE_COLUMNS]
