"""``python -m benchmarks NAME [options]``: run one benchmark (``python -m benchmarks`` lists them)."""

from __future__ import annotations

import importlib
import os
import signal
import sys

from benchmarks import BENCHMARKS
from benchmarks._common import env_with_repo
from perfkit.errors import PerfkitError


def usage() -> str:
    width = max(len(n) for n in BENCHMARKS)
    lines = [f"  {name:<{width}}  {text}" for name, (_, text) in BENCHMARKS.items()]
    return "usage: python -m benchmarks NAME [options]   (NAME --help for its options)\n" + "\n".join(lines)


def run(name: str, argv: list[str]) -> int:
    """Run benchmark ``name`` with ``argv``; its exit code (0 = measured without errors)."""
    module = importlib.import_module(BENCHMARKS[name][0])
    return int(module.main(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Every process a benchmark starts (perfkit's launcher, its workers, a benchmark's own scripts run as
    # `python -m benchmarks.X`) imports this checkout's benchmarks and perfkit, wherever its cwd is.
    os.environ["PYTHONPATH"] = env_with_repo()["PYTHONPATH"]
    # Benchmarks stop the runs they start as Ctrl-C does (SIGINT). Started in the background by a
    # non-interactive shell (`cmd &`), this process and every child would ignore it (an ignored signal
    # survives exec): each stop would wait out its timeout and kill. Its children inherit the default.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] not in BENCHMARKS:
        print(f"bench: unknown benchmark {argv[0]!r}; choose one of {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    try:
        return run(argv[0], argv[1:])
    except PerfkitError as exc:  # a usage error says what to fix in one line, as under `python -m benchmarks`
        print(f"bench {argv[0]}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
