"""Figures into words: the small rules every sentence of the verdict follows (a NaN figure writes no
sentence; an estimate says so)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd


def ok(value: Any) -> bool:
    """A figure that exists: a real, finite number."""
    try:
        return value is not None and not pd.isna(value) and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def present(value: Any) -> bool:
    """A text figure that exists (not None/NaN/empty)."""
    return isinstance(value, str) and bool(value)


def num(value: float) -> str:
    """Three significant digits, no exponent for ordinary magnitudes (0.96, 1.44, 12.3, 171)."""
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def estimated(text: str, est: str) -> str:
    return f"{est}: {text[0].lower()}{text[1:]}" if est else text


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
