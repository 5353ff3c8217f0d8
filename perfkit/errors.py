"""The one exception tree of perfkit.

The library raises these; only the CLI (`perfkit.cli.main`) turns them into a one-line message and an
exit code, so library code never calls ``sys.exit`` or prints.
"""

from __future__ import annotations


class PerfkitError(Exception):
    """Base of every error perfkit expects. ``exit_code`` is what the CLI exits with."""

    exit_code: int = 1


class UsageError(PerfkitError):
    """A bad flag, option combination or config value: nothing was started."""

    exit_code = 2


class DataError(UsageError):
    """An input data file that cannot be used; the message names the file and the problem."""


class ResultsError(UsageError):
    """A directory that is not a usable perfkit run (missing run.json, newer schema, ...)."""


class RunFailed(PerfkitError):
    """Training started but did not complete; what was recorded until then is kept."""

    exit_code = 1


class Regression(PerfkitError):
    """``perfkit diff --fail-if-slower``: B is slower than A by more than the threshold, beyond the noise."""

    exit_code = 1


class TraceNotTaken(PerfkitError):
    """``perfkit watch --trace-now``: a worker's trace window failed, or it did not answer in time."""

    exit_code = 1


class RunInterrupted(PerfkitError):
    """The user pressed Ctrl-C; the run is marked ``interrupted`` and its records kept."""

    exit_code = 130
