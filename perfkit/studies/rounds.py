"""Rounds of repeated runs, each round's order turned one place (A B C, B C A, C A B, ...).

Runs compared against each other are repeated in rounds so that slow drift of the machine hits them alike;
turning the order each round keeps a drift within a round (a machine warming up, a neighbour starting, a
cache filling) from landing on the same run every time. ``perfkit tune``, ``perfkit sweep``, the
benchmarks' ``interleave`` and the scaling calibration all run their rounds with ``rounds``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def turned(items: Sequence[T], round_index: int) -> list[T]:
    """``items`` in round ``round_index``'s order (0-based): starting ``round_index`` places later, wrapped."""
    if not items:
        return []
    start = round_index % len(items)
    return list(items[start:]) + list(items[:start])


def rounds(items: Sequence[T], repeats: int, rotate: bool = True) -> Iterator[tuple[int, T]]:
    """Every item ``repeats`` times, round by round: (0-based round, item), each round ``turned`` one place
    (``rotate=False``: the given order every round, for items that measure what an earlier one left)."""
    for r in range(repeats):
        yield from ((r, item) for item in (turned(items, r) if rotate else items))
