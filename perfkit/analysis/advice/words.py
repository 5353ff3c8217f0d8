"""Advice into words: the one place a cause, a change and its state become the text a person reads (the
terminal's and HTML report's tables, the JSON's text keys, the verdict's line, ``perfkit tune``'s labels)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from perfkit.analysis.advice.records import PROFILE_STEPS, CauseKind, Change, Tried, cell_value
from perfkit.config import KNOB_FLAGS

OPTION_FLAGS = {**KNOB_FLAGS, PROFILE_STEPS: "--profile-steps"}

_CAUSES = {
    CauseKind.REDUCTIONS: "metric and loss reductions ({detail} collectives per step besides the longest)",
    CauseKind.FRAMEWORK: "per-step framework time (Python, function dispatch, callbacks)",
    CauseKind.GRADIENTS: "the gradient all-reduce not hidden under compute",
    CauseKind.STRAGGLER: "waiting for the slowest worker",
    CauseKind.INPUT: "waiting for input",
    CauseKind.VALIDATION: "validation",
    CauseKind.OVERSUBSCRIBED: "oversubscribed threads ({detail})",
    CauseKind.TRACE_WINDOW: "the trace window ({detail} traced steps)",
}
_TRIED = {
    Tried.NOT_YET: "not yet",
    Tried.SCRIPT: "not tried: change the script (api)",
    Tried.NOT_AN_OPTION: "not a perfkit option",
    Tried.PLACEMENT: "not a perfkit option (a different placement)",
    Tried.NEEDS_TRACE: "not tried: perfkit's split needs the trace",
}


def cause_text(kind: CauseKind | str, detail: Any = None) -> str:
    """"metric and loss reductions (15 collectives per step besides the longest)"."""
    text = _CAUSES[CauseKind(kind)]
    return text.format(detail=detail) if "{detail}" in text else text


def change_text(change: Change | None) -> str | None:
    """"--metrics minimal"; None for no change."""
    return None if change is None else f"{OPTION_FLAGS[change.option]} {change.value}"


def budgets_text(budgets: str) -> str:
    return f"host budgets {budgets} (perfkit compare --verify runs it)"


def tried_text(tried: Tried | str) -> str:
    return _TRIED[Tried(tried)]


def view(advice: pd.DataFrame) -> pd.DataFrame:
    """An advice table (records.ADVICE_COLUMNS) with its words: ``cause``, ``knob`` (the option as its flag;
    the straggler's host budgets, which ``perfkit compare --verify`` runs), and ``tried`` as text."""
    if advice.empty:
        return advice.assign(cause=pd.Series(dtype=object), knob=pd.Series(dtype=object))
    out = advice.copy()
    out["cause"] = [cause_text(k, d) for k, d in zip(out["kind"], out["detail"])]
    out["knob"] = [_knob(r) for r in out.itertuples(index=False)]
    out["tried"] = [tried_text(t) for t in out["tried"]]
    return out


def _knob(row: Any) -> str | None:
    if isinstance(row.option, str) and row.option:
        return change_text(Change(row.option, cell_value(row.value)))
    if CauseKind(row.kind) is CauseKind.STRAGGLER and isinstance(row.detail, str) and row.detail:
        return budgets_text(row.detail)
    return None
