"""perfkit's command line: a thin typer app, one module per command.

This module is the only place that turns a ``PerfkitError`` into an exit code and a one-line message.
"""

from __future__ import annotations

import sys

import typer

from perfkit.errors import PerfkitError

app = typer.Typer(
    name="perfkit",
    help="How much faster is a multi-worker TensorFlow run than the single-machine baseline, and why not more.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Each command module adds itself to `app`; imported here so that `perfkit --help` sees them all
    # while TensorFlow itself stays unimported until a command needs it.
    from perfkit.cli import data, run, runs  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    _register()
    try:
        app(args=argv, prog_name="perfkit", standalone_mode=False)
    except PerfkitError as exc:
        print(f"perfkit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("perfkit: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # typer/click exits for --help and usage errors
        return int(exc.code or 0) if isinstance(exc.code, int) or exc.code is None else 2
    except Exception as exc:  # noqa: BLE001 - click's own usage errors arrive here
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return exc.exit_code
        if isinstance(exc, click.exceptions.Abort):
            print("perfkit: aborted", file=sys.stderr)
            return 130
        raise
    return 0
