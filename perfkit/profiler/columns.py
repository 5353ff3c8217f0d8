"""The sampler's rows as they come: an append-only column store, a typed array a column (a list for text),
one DataFrame at the end. A number held in an ``array`` takes its own bytes, not a Python object's; a copy
of the columns so far (``copy``) is what a caller reads while sampling goes on."""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

_TYPECODES = {"int64": "q", "int32": "i", "float64": "d"}


class Columns:
    """Append-only column store: a typed array (or list, for text) per column, one DataFrame at the end."""

    def __init__(self, dtypes: Mapping[str, str]) -> None:
        self._dtypes = dict(dtypes)
        self._data: dict[str, Any] = {
            name: array(_TYPECODES[dtype]) if dtype in _TYPECODES else [] for name, dtype in dtypes.items()
        }

    def extend(self, rows: Sequence[tuple[Any, ...]]) -> None:
        if rows:
            for column, values in zip(self._data.values(), zip(*rows)):
                column.extend(values)

    def copy(self) -> Columns:
        new = Columns(self._dtypes)
        new._data = {name: column[:] for name, column in self._data.items()}
        return new

    def to_frame(self) -> pd.DataFrame:
        series = {}
        for name, column in self._data.items():
            dtype = self._dtypes[name]
            values = np.asarray(column, dtype=dtype) if isinstance(column, array) else column
            series[name] = pd.Series(values, dtype=dtype)
        return pd.DataFrame(series)
