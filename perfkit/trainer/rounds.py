"""Rounds of repeated runs, each round's order turned one place (A B C, B C A, C A B, ...).

Runs compared against each other are repeated in rounds so that slow drift of the machine hits them alike;
turning the order each round keeps a drift within a round (a machine warming up, a neighbour starting, a
cache filling) from landing on the same run every time. ``perfkit tune``, ``perfkit sweep`` and the
benchmarks' ``interleave`` all order their rounds with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def turned(items: Sequence[T], round_index: int) -> list[T]:
    """``items`` in round ``round_index``'s order (0-based): starting ``round_index`` places later, wrapped."""
    if not items:
        return []
    start = round_index % len(items)
    return list(items[start:]) + list(items[:start])
