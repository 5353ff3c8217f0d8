"""``perfkit check overhead``: perfkit measured on the user's machine, as the user runs it."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from perfkit.cli._shared import app
from perfkit.config import PRESETS

if TYPE_CHECKING:
    import pandas as pd

check_app = typer.Typer(help="Check perfkit on this machine: what its recording costs a training.",
                        no_args_is_help=True)
app.add_typer(check_app, name="check")


@check_app.command("overhead")
def overhead_cmd(
    preset: Annotated[str, typer.Option(help=f"Workload size: {', '.join(PRESETS)}.")] = "quick",
    repeats: Annotated[int, typer.Option(help="Rounds: each runs the three arms, its order turned one place.")] = 3,
    epochs: Annotated[Optional[int], typer.Option(help="Override the preset's epochs (at least 2: the first "
                                                  "is warm-up).")] = None,
    train_players: Annotated[Optional[int], typer.Option(help="Training sequences (players).")] = None,
    test_players: Annotated[Optional[int], typer.Option(help="Validation sequences (players).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Where the runs, the data cache and check/overhead-<UTC "
                                              "time>.json go.")] = Path("results"),
    timeout: Annotated[float, typer.Option(help="Seconds one run may take.")] = 3600.0,
) -> None:
    """Train the built-in workload bare, under perfkit untraced, and under perfkit with its trace window, in
    rounds, and say what perfkit's recording costs a steady epoch here.

    The ratios of each round carry this machine's noise as well as perfkit's cost: read their range and N,
    and give it more rounds on a busy machine."""
    from perfkit.errors import UsageError
    from perfkit.trainer.overhead import OverheadSpec, check_overhead, overhead_summary

    if epochs is not None and epochs < 2:
        raise UsageError(f"--epochs: {epochs}; at least 2 (the first epoch is warm-up, left out of the figure)")
    spec = OverheadSpec(preset=preset, repeats=repeats, results_dir=results_dir, epochs=epochs,
                        train_players=train_players, test_players=test_players, timeout_s=timeout)
    console = Console(stderr=True)
    runs = check_overhead(spec, progress=lambda r: console.print(_progress_line(r), highlight=False))
    summary = overhead_summary(runs)
    Console().print(_table(summary))
    for line in _sentences(summary):
        typer.echo(line)
    path = _write(results_dir, spec, runs, summary)
    typer.echo(f"written: {path}")
    if runs["error"].notna().any():
        raise typer.Exit(1)


def _progress_line(r: Any) -> str:
    if r.error:
        return f"round {r.round + 1}, {r.arm}: {r.error}"
    return f"round {r.round + 1}, {r.arm}: steady epoch {r.steady_epoch_s:.2f} s"


def _table(summary: pd.DataFrame) -> Table:
    table = Table(title="perfkit's overhead: steady epoch, each arm against the bare run of its round",
                  title_justify="left")
    for col in ("arm", "runs", "steady epoch s", "x bare (median)", "range", "N rounds"):
        table.add_column(col, justify="left" if col == "arm" else "right")
    for r in summary.itertuples(index=False):
        ratio = "" if math.isnan(r.ratio) else f"{r.ratio:.3f}"
        span = "" if math.isnan(r.ratio) else f"{r.ratio_min:.3f}–{r.ratio_max:.3f}"
        steady = "" if math.isnan(r.steady_epoch_s) else f"{r.steady_epoch_s:.2f}"
        table.add_row(r.arm, f"{r.runs}" + (f" ({r.failed} failed)" if r.failed else ""), steady, ratio, span,
                      str(r.n) if r.arm != "bare" else "")
    return table


def _sentences(summary: pd.DataFrame) -> list[str]:
    rows = summary.set_index("arm")
    out = []
    for arm, what in (("untraced", "recording steps and CPU"), ("traced", "recording with a trace window")):
        r = rows.loc[arm]
        if int(r["n"]) == 0:
            out.append(f"{what}: no round where both it and the bare run finished")
            continue
        out.append(f"{what}: {r['ratio'] - 1:+.1%} of a steady epoch (median of {int(r['n'])} rounds; "
                   f"range {r['ratio_min'] - 1:+.1%} to {r['ratio_max'] - 1:+.1%})")
    return out


def _write(results_dir: Path, spec: Any, runs: pd.DataFrame, summary: pd.DataFrame) -> Path:
    from perfkit.machine import machine_info
    from perfkit.results import utc_now, write_json

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = results_dir / "check" / f"overhead-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(spec).items()}
    write_json(path, {"check": "overhead", "generated": utc_now(), "params": params, "machine": machine_info(),
                      "runs": json.loads(runs.to_json(orient="records")),
                      "summary": json.loads(summary.to_json(orient="records"))})
    return path
