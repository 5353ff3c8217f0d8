"""Tried advice against its prediction (``perfkit tune``): per change, the measured speedup of its steady
epoch over the default configuration's (means over the repeats, and their range), the prediction the advice
made and its error, the accuracy against the default's, and each against the single-machine baseline.

A change is a gain when its speedup exceeds 1 by more than the default's own spread over its repeats (its
slowest steady epoch over its fastest, at least ``MIN_GAIN``), slower when its steady epoch exceeds the
default's by more than that spread ("slower: 0.89x of the default"), else no gain. A change whose validation
accuracy falls below the default's by more than the run-to-run spread (the default's range over its repeats,
at least ``DIVERGED_FLOOR``) is reported as diverged, not as a gain; a change whose runs failed is reported as
failed with the error.

A run whose cluster was restarted (run.json ``restarts``: a worker crashed, the epoch it was in ran again)
has a steady epoch that holds the restart and the re-run's warm-up (measured: 16.5 s against 14.6 s for the
same configuration): it is left out of its change's mean when the change has a run without one, and the
outcome says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perfkit.analysis.advice import Advice, in_combination
from perfkit.analysis.analyze import analyze
from perfkit.analysis.result import Analysis
from perfkit.errors import PerfkitError
from perfkit.results import load_meta

DIVERGED_FLOOR = 0.02  # validation accuracy: below this, two runs of one configuration differ by noise
MIN_GAIN = 0.01  # a speedup within this of 1 (or within the default's own spread, if larger) is no gain nor loss
TRIED_COLUMNS = ["change", "runs", "predicted_speedup", "predicted_lo", "predicted_hi", "measured_speedup",
                 "measured_lo", "measured_hi", "error", "within_range", "vs_baseline", "val_accuracy_gap",
                 "outcome", "run_ids"]


@dataclass(frozen=True)
class TriedRuns:
    """What the tuner ran for one change (analysis needs only this, not the trainer's types)."""

    change: str
    runs: tuple[Path, ...]
    failed: tuple[str, ...] = ()
    predicted: tuple[float, float, float] = (math.nan, math.nan, math.nan)  # speedup, low, high


@dataclass(frozen=True)
class _Default:
    """The default configuration's figures every change is judged against (one rule for the table and for
    the tuner's choice of what to combine)."""

    epoch: float  # mean steady epoch
    acc: float  # mean validation accuracy
    spread: float  # accuracy spread over its runs, at least DIVERGED_FLOOR
    noise: float  # epoch spread over its runs (slowest / fastest - 1), at least MIN_GAIN

    @classmethod
    def of(cls, runs: pd.DataFrame, ids: Sequence[str]) -> _Default:
        epochs = runs.loc[list(ids), "steady_epoch_s"].astype(float)
        acc = runs.loc[list(ids), "val_accuracy"].astype(float)
        noise = float(epochs.max() / epochs.min() - 1) if len(epochs) > 1 else 0.0
        spread = float(acc.max() - acc.min()) if len(acc) > 1 else 0.0
        return cls(float(epochs.mean()), float(acc.mean()), max(spread, DIVERGED_FLOOR), max(noise, MIN_GAIN))


def steady_runs(runs: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """The runs without a restart (all of them when every one restarted), and why each other was left out."""
    restarted = {p: _restart(p) for p in runs}
    kept = [p for p in runs if not restarted[p]]
    if not kept:
        return list(runs), []
    return kept, [f"{p.name} left out: restarted ({restarted[p]})" for p in runs if restarted[p]]


def _restart(run: Path) -> str:
    """What the run's first restart came after ("" for none, or a run.json that cannot be read)."""
    try:
        restarts = load_meta(run).restarts
    except (PerfkitError, OSError):
        return ""
    if not restarts:
        return ""
    first = restarts[0]
    return str(first.get("after") or "") if isinstance(first, dict) and first.get("after") else "cluster restarted"


def gained(runs: Sequence[Path], default_runs: Sequence[Path], results_dir: Path) -> bool:
    """Whether a change's runs were faster than the default's without losing accuracy (the table's rule)."""
    if not runs:
        return False
    a = analyze([*default_runs, *runs], results_dir).runs.set_index("run_id")
    default = _Default.of(a, [p.name for p in steady_runs(default_runs)[0]])
    return str(_row(TriedRuns("change", tuple(runs)), a, default, math.nan)["outcome"]).startswith("gain")


def tried_table(baseline: Path, tried: Sequence[TriedRuns], results_dir: Path) -> tuple[pd.DataFrame, Analysis]:
    """TRIED_COLUMNS, the default first; and the analysis of every run against the baseline."""
    paths = [baseline] + [p for t in tried for p in t.runs]
    a = analyze(paths, results_dir, baseline.name)
    runs = a.runs.set_index("run_id")
    default = _Default.of(runs, [p.name for p in steady_runs(next(t for t in tried if t.change == "default").runs)[0]])
    base_epoch = float(runs.loc[baseline.name, "steady_epoch_s"])
    rows = [_row(t, runs, default, base_epoch) for t in tried]
    return pd.DataFrame(rows, columns=TRIED_COLUMNS), a


def _row(t: TriedRuns, runs: pd.DataFrame, default: _Default, base_epoch: float) -> dict[str, object]:
    kept, left_out = steady_runs(t.runs)
    ids = [p.name for p in kept if p.name in runs.index]
    epochs = runs.loc[ids, "steady_epoch_s"].astype(float) if ids else pd.Series(dtype=float)
    each = default.epoch / epochs if ids else pd.Series(dtype=float)
    measured = default.epoch / float(epochs.mean()) if ids else math.nan
    acc_gap = float(runs.loc[ids, "val_accuracy"].astype(float).mean()) - default.acc if ids else math.nan
    pred, lo, hi = t.predicted
    if not ids:
        outcome = "failed: " + (t.failed[0] if t.failed else "no run completed")
    elif t.change != "default" and math.isfinite(acc_gap) and acc_gap < -default.spread:
        outcome = f"diverged: validation accuracy {acc_gap:+.4f} against the default's (spread {default.spread:.4f})"
    elif t.change == "default":
        outcome = "the configuration as given"
    else:
        outcome = _speed_outcome(measured, default.noise)
    if ids and left_out:
        outcome += "; " + "; ".join(left_out)
    return {"change": t.change, "runs": len(ids), "predicted_speedup": pred, "predicted_lo": lo, "predicted_hi": hi,
            "measured_speedup": measured, "measured_lo": float(each.min()) if ids else math.nan,
            "measured_hi": float(each.max()) if ids else math.nan,
            "error": pred / measured - 1 if math.isfinite(pred) and measured > 0 else math.nan,
            "within_range": bool(lo <= measured <= hi) if math.isfinite(lo) and math.isfinite(measured) else None,
            "vs_baseline": base_epoch / float(epochs.mean()) if ids else math.nan,
            "val_accuracy_gap": acc_gap, "outcome": outcome, "run_ids": " ".join(ids)}


def _speed_outcome(measured: float, noise: float) -> str:
    """A gain beyond the default's spread, a loss beyond it (its epoch that much longer than the default's),
    else no gain."""
    if measured > 1 + noise:
        return "gain"
    if measured < 1 / (1 + noise):
        return f"slower: {measured:.2f}x of the default"
    return f"no gain (within {noise:.0%} of the default)"


def predicted_for(advice: Sequence[Advice]) -> tuple[float, float, float]:
    """The (speedup, low, high) predicted for changes tried together (none: NaN): their epoch savings added
    (each 1 - 1/speedup of the epoch), a saving two of them claim counted once (``in_combination``)."""
    if not advice:
        return math.nan, math.nan, math.nan
    kinds = [a.kind for a in advice]
    parts = [in_combination(a.kind, kinds, a.predicted) for a in advice]
    out = []
    for name in ("speedup", "lo", "hi"):
        left = 1 - sum(1 - 1 / getattr(p, name) for p in parts)
        out.append(1 / left if left > 0 else math.nan)
    return out[0], out[1], out[2]


def tuned_run(table: pd.DataFrame) -> str | None:
    """The fastest configuration that ran and did not diverge: its last run's id."""
    ran = table["outcome"].str.startswith(("gain", "the configuration as given"))
    ok = table[ran & table["measured_speedup"].notna()]
    if ok.empty:
        return None
    return str(ok.sort_values("measured_speedup")["run_ids"].iloc[-1]).split()[-1]
