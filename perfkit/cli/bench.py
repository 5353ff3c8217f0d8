"""`perfkit bench NAME [ARGS...]`: run one of the benchmark scripts of the ``bench`` package.

Thin: everything after NAME goes to the benchmark untouched (``perfkit bench overhead --help`` shows
that benchmark's own options). The same as ``python -m perfkit.bench NAME [ARGS...]``.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from perfkit.cli._shared import app


def _names() -> dict[str, tuple[str, str]]:
    from perfkit.errors import UsageError

    try:
        from perfkit.bench import BENCHMARKS
    except ImportError:
        raise UsageError("bench: the benchmark scripts are not installed (the `bench` package ships with "
                         "perfkit's source; reinstall perfkit with `pip install .`)") from None
    return BENCHMARKS


@app.command("bench", context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                        "help_option_names": []})
def bench_command(
    ctx: typer.Context,
    name: Annotated[Optional[str], typer.Argument(help="Benchmark to run; without one, list them.",
                                                  show_default=False)] = None,
) -> None:
    """Run a benchmark: overhead, autorecord, tune, trainer, multiworker, datagen, analysis-speed, article,
    separability, allreduce, trace-reliability, network, whatif.

    Options after NAME are the benchmark's own (NAME --help lists them); each writes
    results/bench/<name>-<UTC time>.json and prints a Markdown table.
    """
    from perfkit.errors import UsageError

    names = _names()
    if name is None or name in ("-h", "--help"):
        width = max(len(n) for n in names)
        typer.echo("usage: perfkit bench NAME [OPTIONS]   (NAME --help: its options)\n" +
                   "\n".join(f"  {n:<{width}}  {text}" for n, (_, text) in names.items()))
        return
    if name not in names:
        raise UsageError(f"bench: unknown benchmark {name!r}; choose one of {', '.join(names)}")
    from perfkit.bench.__main__ import run

    code = run(name, list(ctx.args))
    if code:
        raise typer.Exit(code)
