"""The renderers of an analysis: one family with one signature.

Every format is a module here with ``render(a, out, options)``: it writes the same ``Analysis`` (analysis
DataFrames and the verdict) to a text stream, and never computes a figure itself. ``render`` picks the
module by name; ``write`` puts the output in a file through a temporary file and a rename, so a failed
render leaves nothing half-written. Modules are imported on use (the HTML one loads plotly).
Beside the family: ``progress`` draws a run live from the trainer's events (the terminal's progress bars),
not an analysis; ``scaling_*`` render a scaling study.
"""

from __future__ import annotations

import importlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from perfkit._atomic import atomic_write
from perfkit.errors import UsageError

if TYPE_CHECKING:
    from perfkit.analysis.result import Analysis

FORMATS = ("console", "json", "csv", "html")


@dataclass(frozen=True)
class RenderOptions:
    verdict_last: bool = False  # console: the tables first, so a long study ends with the answer
    width: int | None = None  # console: columns; None = the terminal's (or rich's default off a terminal)
    verdict_only: bool = False  # console: the verdict and the what-ifs' assumptions, no tables


def render(fmt: str, a: Analysis, out: TextIO, options: RenderOptions = RenderOptions()) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")
    importlib.import_module(f"perfkit.analysis.renderers.{fmt}").render(a, out, options)


def write(fmt: str, a: Analysis, path: Path, options: RenderOptions = RenderOptions()) -> None:
    """Render straight into the temp file that becomes ``path``: a large run's JSON is hundreds of MB, held
    twice more (the text, then its bytes) when rendered in memory first."""
    def into(fh: BinaryIO) -> None:
        text = io.TextIOWrapper(fh, encoding="utf-8", newline="\n", write_through=False)
        render(fmt, a, text, options)
        text.flush()
        text.detach()  # the temp file is atomic_write's to close

    atomic_write(Path(path), into)
