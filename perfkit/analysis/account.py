"""The verdict's lines of a run's account (verdict.py places them): where the speedup went in a steady epoch
and over the whole command (analysis/waterfall.py), and the goodput ledger (analysis/goodput.py)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from perfkit.analysis.words import num, ok


def waterfall_line(row: Any, waterfall: pd.DataFrame) -> str:
    """Where the ideal speedup went, the largest losses first (analysis/waterfall.py); "" without one."""
    w = (waterfall[(waterfall["run_id"] == row.run_id) & (waterfall["level"] == "steady")] if not waterfall.empty
         else waterfall)
    if w.empty or not ok(row.ideal_speedup):
        return ""
    terms, rest = w.iloc[:-1], w.iloc[-1]  # the last row is "not explained"
    big = terms[terms["share"].abs() >= 0.02]
    took = [f"{t.words} {_took(t.speedup_lost)}{_checked(t)}" for t in big.itertuples(index=False)]
    small = terms[terms["share"].abs() < 0.02]
    if not small.empty:
        others = small["words"].iloc[0] if len(small) == 1 else f"the other {len(small)} terms together"
        took.append(f"{others} {_took(small['speedup_lost'].sum())}")
    given = f"{row.ideal_speedup:.2f}x that its compute could give ({num(row.wf_cores)} cores against the baseline's"
    base_cores = row.wf_cores / row.ideal_speedup
    return (f"Where the speedup went: of the {given} {num(base_cores)}), " + ", ".join(took)
            + f"; not explained {_took(rest.speedup_lost)} ({abs(rest.share):.0%} of the lost time); "
            f"{row.speedup:.2f}x measured (seconds per 1,000 samples, each term against the baseline's share: "
            "the waterfall table).")


def command_waterfall_line(row: Any, waterfall: pd.DataFrame) -> str:
    """The whole command's waterfall in one sentence: its measured speedup and its three largest losses."""
    w = (waterfall[(waterfall["run_id"] == row.run_id) & (waterfall["level"] == "command")] if not waterfall.empty
         else waterfall)
    if w.empty:
        return ""
    terms = w.iloc[:-1]
    top = [t for t in terms.reindex(terms["lost_s"].abs().sort_values(ascending=False).index).itertuples(index=False)
           if abs(t.share) >= 0.02][:3]
    return (f"Over the whole command (start to end, per sample) the speedup is {w['speedup_after'].iloc[-1]:.2f}x "
            f"of the {row.ideal_speedup:.2f}x; " + ", ".join(f"{t.words} {_took(t.speedup_lost)}" for t in top)
            + " (the goodput ledger's buckets against the baseline's).")


def _checked(term: Any) -> str:
    """Beside a term a run made to remove it acted on (an equal-workers run, a tune run of advice): the speedup
    predicted with the change, and the one measured."""
    if not isinstance(getattr(term, "checked_by", None), str):
        return ""
    return (f" (checked by {term.checked_by}: {term.predicted_speedup:.2f}x predicted, "
            f"{term.measured_speedup:.2f}x measured)")


def _took(speedup_lost: float) -> str:
    return f"took {speedup_lost:.2f}x" if speedup_lost >= 0 else f"gave back {-speedup_lost:.2f}x"


def goodput_line(run_id: str, goodput: pd.DataFrame) -> str:
    """Where the whole command's time went (analysis/goodput.py), for the median worker; "" without it."""
    g = goodput[goodput["run_id"] == run_id] if not goodput.empty else goodput
    if g.empty:
        return ""
    from perfkit.analysis.goodput import Bucket, median_worker

    mid = median_worker(g)
    span = float(mid["span_s"])
    rest = sorted((b for b in Bucket if b is not Bucket.PRODUCTIVE and mid[b.column] >= 0.01 * span),
                  key=lambda b: -mid[b.column])
    who = "its worker" if len(g) == 1 else f"worker {int(mid['worker'])} (the median)"
    parts = ", ".join(f"{b.words} {mid[b.column]:.1f} s" for b in rest)
    total = float(g["productive_s"].sum()) / float(g["span_s"].sum())
    return (f"Goodput {total:.0%} (training steps over the whole command, every worker): of the command's "
            f"{span:.1f} s, {who} trained {mid['productive_s']:.1f} s" + (f"; {parts}" if parts else "")
            + ("; checkpoint saves were not timed (a run recorded before perfkit timed them)."
               if g["checkpoint_s"].isna().any() else "."))
