"""Per-group figures of large tables with few groups: the CPU samples (10M rows, tens of processes or
workers per run).

Why not pandas' group-by here: its quantile sorts every value together with its group code (a lexsort of
all 10M rows: the largest part of the CPU tables' time in a py-spy profile of a 16-worker analysis), where
with few groups one selection per group (``np.partition``) is linear; and each group-by hashes its key
again, where one factorisation here serves every figure of a table. The results are pandas' own: the same
linear interpolation for a quantile (``val + (next - val) * frac``), NaN left out, and sums, means and
maxima over each group's values in row order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Groups:
    """The rows of each distinct key, found once: ``order`` lists row positions grouped by key (row order
    kept within a group), group i being ``order[bounds[i]:bounds[i + 1]]``; ``keys`` sorted."""

    keys: np.ndarray
    order: np.ndarray
    bounds: np.ndarray

    @classmethod
    def of(cls, key: Any) -> Groups:
        codes, keys = pd.factorize(pd.Series(key), sort=True)
        # A stable sort of 16-bit integers is a radix sort in numpy: linear, where int64 would be a merge sort.
        small = codes.astype(np.int16 if len(keys) < 2**15 else np.int64)
        order = np.argsort(small, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(keys)))]).astype(np.int64)
        return cls(np.asarray(keys), order, bounds)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    def rows(self, i: int) -> np.ndarray:
        return self.order[self.bounds[i]:self.bounds[i + 1]]

    def first(self, values: Any) -> np.ndarray:
        at = self.order[self.bounds[:-1]]
        # A text column taken whole into numpy would make 10M Python strings to keep a few of them.
        return values.take(at).to_numpy() if isinstance(values, pd.Series) else np.asarray(values)[at]

    def sum(self, values: Any) -> np.ndarray:
        return self._each(values, lambda v: v[~np.isnan(v)].sum() if v.dtype.kind == "f" else v.sum())

    def mean(self, values: Any) -> np.ndarray:
        return self._each(values, lambda v: np.nanmean(v) if v.dtype.kind == "f" else v.mean(), float)

    def max(self, values: Any) -> np.ndarray:
        return self._each(values, lambda v: np.nanmax(v) if v.dtype.kind == "f" else v.max())

    def quantile(self, values: Any, q: float) -> np.ndarray:
        return self._each(values, lambda v: quantile(v, q), float)

    def _each(self, values: Any, fn: Any, dtype: Any = None) -> np.ndarray:
        ordered = np.asarray(values)[self.order]
        out = [fn(ordered[a:b]) for a, b in zip(self.bounds[:-1], self.bounds[1:])]
        return np.asarray(out, dtype=dtype)


def quantile(values: np.ndarray, q: float) -> float:
    """pandas' linear-interpolation quantile of ``values`` (NaN left out) by selection, not a sort."""
    v = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    if len(v) == 0:
        return float("nan")
    position = q * (len(v) - 1)
    k = int(position)
    frac = position % 1
    if k + 1 >= len(v) or frac == 0:
        return float(np.partition(v, k)[k])
    part = np.partition(v, [k, k + 1])
    low, high = float(part[k]), float(part[k + 1])
    return low + (high - low) * frac
