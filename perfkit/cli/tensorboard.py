"""`perfkit tensorboard`: TensorBoard over chosen runs (Scalars and the Profile tab), on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from perfkit.cli._shared import app


@app.command("tensorboard")
def tensorboard_command(
    runs: Annotated[Optional[list[str]], typer.Argument(help="Run directories or run ids (default: every run "
                                                        "in --results-dir).", show_default=False)] = None,
    results_dir: Annotated[Path, typer.Option(help="Where run directories live.")] = Path("results"),
    port: Annotated[int, typer.Option(help="Port to serve on (0: a free one).")] = 0,
    host: Annotated[str, typer.Option(help="Address to bind; anything but loopback exposes your runs.")] = "127.0.0.1",
) -> None:
    """Start TensorBoard on the runs' logdirs, print its URL, and stop it cleanly on Ctrl-C."""
    from perfkit.cluster import free_ports
    from perfkit.errors import UsageError
    from perfkit.profiler.board import Board, BoardSpec, build_view, resolve_runs

    if not 0 <= port <= 65535:
        raise UsageError(f"--port: {port} is not between 0 and 65535")
    if not results_dir.is_dir() and not runs:
        raise UsageError(f"--results-dir: {results_dir} is not a directory")
    try:
        chosen = port or free_ports(1, host)[0]
    except OSError as exc:  # an unknown name or an address that is not this machine's
        raise UsageError(f"--host: cannot listen on {host!r} ({exc.strerror or exc})") from None
    view = build_view(resolve_runs(runs, results_dir)) if runs else None
    spec = BoardSpec(logdir=view or results_dir.resolve(), host=host, port=chosen)
    board = Board(spec, view)
    try:
        board.start()
        typer.echo(f"TensorBoard on {spec.url} (logdir {spec.logdir}); Profile tab: {spec.url}#profile")
        typer.echo("Press Ctrl-C to stop.")
        board.wait()
    except KeyboardInterrupt:  # the way to stop it: not an error
        typer.echo("TensorBoard stopped.")
    finally:
        board.stop()

