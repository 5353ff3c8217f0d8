"""`perfkit diff A B`: two runs (or two sets of repeated runs) side by side, each difference marked
significant or within noise; ``--fail-if-slower PCT`` exits 1 on a regression, for CI.

Thin: resolve the runs (as `perfkit export` does), call ``perfkit.analysis.diff.diff`` and its renderers.
pandas and the analysis modules are imported inside the command, so ``--help`` stays fast.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from perfkit.cli._shared import Format, app, resolve_run

_SIDE = ("{side}: a run directory or a run id under --results-dir; repeated runs of one configuration "
         "comma-separated ({name}1,{name}2,{name}3), so the noise band comes from their spread.")


@app.command("diff")
def diff_command(
    a: Annotated[str, typer.Argument(metavar="A", help=_SIDE.format(side="Before", name="A"), show_default=False)],
    b: Annotated[str, typer.Argument(metavar="B", help=_SIDE.format(side="After", name="B"), show_default=False)],
    results_dir: Annotated[Path, typer.Option(help="Where run directories live.")] = Path("results"),
    fmt: Annotated[Format, typer.Option("--format", help="table: the terminal's tables; json: every figure as "
                                        "JSON.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option(help="--format json: write the JSON here instead of stdout.",
                                                   show_default=False)] = None,
    html: Annotated[Optional[Path], typer.Option(help="Also write an HTML page of the comparison here.",
                                                 show_default=False)] = None,
    fail_if_slower: Annotated[Optional[float], typer.Option(
        "--fail-if-slower", metavar="PCT", help="Exit 1 when B is slower than A per sample by more than PCT "
        "percent beyond the noise (the band's lower end above PCT): a CI gate.", show_default=False)] = None,
) -> None:
    """Compare two runs: throughput, step split, straggler, CPU per 1,000 samples, the waterfall and goodput
    side by side, the traced ops that moved most per worker, each difference against the noise."""
    from perfkit.errors import UsageError

    if fail_if_slower is not None and not (math.isfinite(fail_if_slower) and fail_if_slower >= 0):
        raise UsageError(f"--fail-if-slower: {fail_if_slower:g} is not a percentage >= 0 (e.g. 5 for 5%)")
    if output is not None and fmt is not Format.json:
        raise UsageError("--output: only with --format json (the table goes to the terminal)")
    for flag, path in (("--output", output), ("--html", html)):
        if path is not None and path.is_dir():
            raise UsageError(f"{flag}: {path} is a directory; give a file path")
    from perfkit._atomic import atomic_write
    from perfkit.analysis.diff import diff
    from perfkit.analysis.renderers import diff as render

    sides = [[resolve_run(name.strip(), results_dir) for name in side.split(",") if name.strip()] for side in (a, b)]
    for flag, runs in zip(("A", "B"), sides, strict=True):
        if not runs:
            raise UsageError(f"{flag}: no run named; give a run directory or run id")
    result = diff(sides[0], sides[1])
    if fmt is Format.json:
        text = io.StringIO()
        render.render_json(result, text)
        if output is None:
            typer.echo(text.getvalue(), nl=False)
        else:
            atomic_write(output, lambda fh: fh.write(text.getvalue().encode()))
    else:
        render.render_console(result, typer.get_text_stream("stdout"))
    if html is not None:
        atomic_write(html, lambda fh: fh.write(render.page(result).encode()))
    _gate(result, fail_if_slower)


def _gate(result, pct: float | None) -> None:  # type: ignore[no-untyped-def]
    """--fail-if-slower: B's slowdown beyond the noise against the threshold."""
    from perfkit.errors import Regression, UsageError

    if pct is None:
        return
    if not math.isfinite(result.slowdown):
        raise UsageError("--fail-if-slower: no steady steps with samples on one side, so no speed to compare")
    floor = result.slowdown_lo if math.isfinite(result.slowdown_lo) else result.slowdown
    if floor > pct / 100:
        raise Regression(f"B is {result.slowdown:.1%} slower than A per sample (band from {floor:+.1%}), more "
                         f"than --fail-if-slower {pct:g}% beyond the noise ({result.band_note})")
