"""CSV: the per-run table (one row per analysed run, the JSON ``runs`` keys as columns)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from perfkit.analysis.renderers import RenderOptions
from perfkit.analysis.renderers.json import KEYS

if TYPE_CHECKING:
    from perfkit.analysis.result import Analysis


def render(a: Analysis, out: TextIO, options: RenderOptions = RenderOptions()) -> None:
    cols = [c for c in KEYS["runs"] if c in a.runs.columns]
    out.write(a.runs[cols].to_csv(index=False))
