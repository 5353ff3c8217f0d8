"""`perfkit run`: train once under a strategy and record everything into a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from perfkit.cli import app
from perfkit.config import DEFAULT_CLASS_WEIGHT, PRESETS, Mode, RunConfig, parse_class_weight
from perfkit.errors import UsageError

_CW_DEFAULT = ",".join(f"{k}:{v:g}" for k, v in DEFAULT_CLASS_WEIGHT.items())


@app.command("run")
def run_command(
    mode: Annotated[Mode, typer.Option(help="single: MirroredStrategy in one process.")] = Mode.single,
    preset: Annotated[str, typer.Option(help=f"Workload size: {', '.join(PRESETS)}.")] = "quick",
    epochs: Annotated[Optional[int], typer.Option(help="Override the preset's epochs.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Global batch (article: 1024).")] = None,
    train_players: Annotated[Optional[int], typer.Option(help="Training sequences (players).")] = None,
    test_players: Annotated[Optional[int], typer.Option(help="Validation sequences (players).")] = None,
    sequence_length: Annotated[Optional[int], typer.Option(help="Days per sequence (article: 7).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Data generation and shuffling seed.")] = None,
    class_weight: Annotated[str, typer.Option(help="Class weights as '0:W0,1:W1'.")] = _CW_DEFAULT,
    data: Annotated[Optional[Path], typer.Option(help="Your own Parquet/CSV (player_id, day, 18 features, label).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Where run directories are created.")] = Path("results"),
    run_id: Annotated[Optional[str], typer.Option(help="Run id (default: <UTC time>-<mode>[-<label>]).")] = None,
    label: Annotated[Optional[str], typer.Option(help="Appended to the generated run id.")] = None,
    sample_interval: Annotated[float, typer.Option(help="Seconds between CPU samples.")] = 0.5,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress or summary; print only the run directory.")] = False,
) -> None:
    """Train the bot-player LSTM once and record steps, epochs and CPU% under RESULTS_DIR/<run-id>."""
    if mode is Mode.multi:
        raise UsageError("--mode multi: multi-worker runs are not available in this version yet; use --mode single")
    cfg = RunConfig.from_preset(
        mode, preset, epochs=epochs, batch_size=batch_size, train_players=train_players, test_players=test_players,
        sequence_length=sequence_length, seed=seed, class_weight=parse_class_weight(class_weight),
        data_path=str(data) if data is not None else None, sample_interval=sample_interval, label=label,
    )
    console = Console(stderr=False, quiet=quiet)
    observer = _observer(console, quiet)
    from perfkit.trainer.single import run_single

    try:
        path = run_single(cfg, results_dir, observer, run_id=run_id)
    finally:
        if hasattr(observer, "close"):
            observer.close()
    if quiet:
        typer.echo(str(path))  # scripts get the run directory and nothing else
    else:
        _print_summary(console, path)


def _observer(console: Console, quiet: bool):  # type: ignore[no-untyped-def]
    from perfkit.cli._render import ProgressObserver
    from perfkit.trainer.events import NullObserver

    return NullObserver() if quiet else ProgressObserver(console)


def _print_summary(console: Console, path: Path) -> None:
    from perfkit.analysis.summary import epoch_table, summarize
    from perfkit.cli._render import summary_table
    from perfkit.results import RunRecord

    record = RunRecord.load(path)
    console.print(summary_table(summarize(record), epoch_table(record)))
    console.print(f"run directory: {path}")
