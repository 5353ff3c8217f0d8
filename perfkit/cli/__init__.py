"""perfkit's command line: a thin typer app, one module per command.

This module is the only place that turns a ``PerfkitError`` into an exit code and a one-line message.
"""

from __future__ import annotations

import sys

import typer

from perfkit._atomic import is_disk_error, write_error
from perfkit.cli._help import dress
from perfkit.cli._shared import app
from perfkit.errors import PerfkitError

__all__ = ["app", "main"]


def _register() -> None:
    # Each command module adds itself to `app`; imported here so that `perfkit --help` sees them all
    # while TensorFlow itself stays unimported until a command needs it.
    from perfkit.cli import (  # noqa: F401
        analyze,  # noqa: F401
        check,
        compare,
        data,
        diff,
        export,
        launch,
        run,
        runs,
        sweep,  # noqa: F401
        tensorboard,
        tune,
        watch,
    )


def _interrupt_on_term_and_hangup() -> None:
    """SIGTERM (a process manager, `kill`) and SIGHUP (a closed terminal) stop any command the way Ctrl-C
    does, so its cleanup runs: workers and TensorBoard stopped, namespaces and cgroups removed, the run
    marked interrupted. Only the first one interrupts; a second cannot cut that cleanup short."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt

    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, interrupt)
    except ValueError:  # not the main thread (main() called by a library user's thread): leave them be
        pass


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except OSError:  # the terminal is gone (SIGHUP): the exit code and run.json still say it
        pass


def main(argv: list[str] | None = None) -> int:
    _register()
    _interrupt_on_term_and_hangup()
    command = typer.main.get_command(app)
    dress(command, "perfkit")
    try:
        result = command(args=argv, prog_name="perfkit", standalone_mode=False)
    except PerfkitError as exc:
        _say(f"perfkit: error: {exc}")
        return exc.exit_code
    except (KeyboardInterrupt, typer.Abort):
        _say("perfkit: interrupted")
        return 130
    except OSError as exc:
        if not is_disk_error(exc):
            raise
        # A full or read-only disk met outside a run's own records (the data cache, an analysis' outputs).
        _say(f"perfkit: error: {write_error(exc)}")
        return 1
    except typer.Exit as exc:
        return int(exc.exit_code)
    except Exception as exc:
        # A usage error of the CLI parser (click's, vendored or not by typer): one line, as every other error,
        # naming the command and how to see its options.
        message, code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
        if callable(message) and isinstance(code, int):
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else "perfkit"
            _say(f"{where}: error: {' '.join(str(message()).split())} ({where} -h for help)")
            return code
        raise
    return result if isinstance(result, int) else 0
