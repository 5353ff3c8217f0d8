"""``perfkit data generate|check``: make the synthetic dataset, or validate a user's table."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from perfkit.cli._shared import app
from perfkit.config import PRESETS, get_preset
from perfkit.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

# numpy, pandas and the workload's modules are imported inside the commands: every perfkit command
# registers this module, and pandas alone took 0.37 s of each one's start (`perfkit --help` included).

data_app = typer.Typer(
    help="Generate the synthetic bot-detection dataset, or check a table of your own.",
    no_args_is_help=True,
)
app.add_typer(data_app, name="data")


@data_app.command("generate")
def generate_cmd(
    preset: Annotated[str, typer.Option(help=f"Workload size: {', '.join(PRESETS)} (train + test players).")] = "quick",
    players: Annotated[Optional[int], typer.Option(help="Number of players; overrides the preset.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Random seed; default: the preset's.")] = None,
    sequence_length: Annotated[
        Optional[int], typer.Option("--sequence-length", help="Days per player; default: the preset's.")
    ] = None,
    out: Annotated[
        Optional[Path], typer.Option(help="Output .parquet or .csv; default: <results-dir>/datasets/<cache name>.")
    ] = None,
    results_dir: Annotated[Path, typer.Option("--results-dir", help="Where results live.")] = Path("results"),
) -> None:
    """Generate the synthetic dataset and write it atomically (the same file a run would cache)."""
    from perfkit.workloads.botdetector.data import LABEL_COL, SUFFIXES, dataset_cache_path, write_table
    from perfkit.workloads.botdetector.params import BotParams
    from perfkit.workloads.botdetector.synth import generate

    bot = BotParams.for_preset(preset)
    n = bot.train_players + bot.test_players if players is None else players
    length = bot.sequence_length if sequence_length is None else sequence_length
    seed = get_preset(preset).seed if seed is None else seed
    if n < 2:
        raise UsageError("--players: must be at least 2 (one to train on, one to test)")
    if length < 1:
        raise UsageError("--sequence-length: must be at least 1")
    path = out if out is not None else dataset_cache_path(results_dir / "datasets", n, seed, length)
    if path.suffix.lower() not in SUFFIXES:  # before minutes of generating, not after
        raise UsageError(f"--out: {path} must end in {' or '.join(SUFFIXES)}")
    start = time.perf_counter()
    df = generate(n, seed, length)
    write_table(df, path)
    seconds = time.perf_counter() - start
    share = float(df[LABEL_COL].to_numpy()[::length].mean())
    typer.echo(f"wrote {path}")
    typer.echo(f"  {len(df):,} rows, {n:,} players x {length} days, bot share {share:.1%}, seed {seed}")
    typer.echo(f"  generated and written in {seconds:.1f} s")


def _summary_table(df: pd.DataFrame) -> Table:
    from perfkit.workloads.botdetector.data import FEATURES, LABEL_COL

    means = df.groupby(LABEL_COL, sort=True)[list(FEATURES)].mean()
    table = Table(title="per-day feature means", title_justify="left")
    table.add_column("feature")
    for name in ("humans", "bots"):
        table.add_column(name, justify="right")
    for feature in FEATURES:
        cells = [f"{means.at[k, feature]:,.2f}" if k in means.index else "-" for k in (0, 1)]
        table.add_row(feature, *cells)
    return table


@data_app.command("check")
def check_cmd(
    path: Annotated[Path, typer.Argument(help="A .parquet or .csv table in perfkit's long form.")],
    sequence_length: Annotated[int, typer.Option("--sequence-length", help="Days per player.")] = 7,
) -> None:
    """Validate a table; print a summary, or fail with one line saying what is wrong."""
    import numpy as np

    from perfkit.workloads.botdetector.data import FEATURES, ID_COL, LABEL_COL, load_table

    if sequence_length < 1:
        raise UsageError("--sequence-length: must be at least 1")
    df = load_table(path, sequence_length)
    labels = df[LABEL_COL].to_numpy()[::sequence_length]
    players = int(df[ID_COL].nunique())
    console = Console()
    console.print(
        f"{path}: OK. {players:,} players x {sequence_length} days = {len(df):,} rows; "
        f"{int(labels.sum()):,} bots ({float(np.mean(labels)):.1%}), {players - int(labels.sum()):,} humans; "
        f"{len(FEATURES)} features.",
        soft_wrap=True,
    )
    console.print(_summary_table(df))
