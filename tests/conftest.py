"""Suite-wide rules: which tests need TensorFlow, a time limit for every test, and which tests run alone.

- ``tf``: the test needs the TensorFlow distribution (it trains, starts TF servers, or parses captures
  with the profiler's schema shipped inside it). Every integration test is one; unit modules that are
  mark themselves. Without TensorFlow installed they are skipped, saying why, instead of failing.
- A test without its own ``@pytest.mark.timeout(N)`` gets the default for its kind (unit 120 s,
  integration 600 s); one that asks for longer gets what it asks for (no global limit cuts it).
- The suite runs on two pytest-xdist workers (pyproject's addopts): most integration tests wait on
  processes, servers and timeouts as much as they compute, so two at a time use a 2-core machine's idle
  half. A ``solo`` test measures a CPU share, a rate or a link's speed, which another test beside it would
  distort: it runs with nothing beside it (a fair reader-writer lock between the workers; every other test
  holds it shared). Run serially with ``pytest -n 0``.
- The order files are dealt to the workers in (``--dist loadfile --no-loadscope-reorder``): xdist's own
  (most tests first) dealt the integration modules, a few minute-long tests each, last, so that one of them
  ended the suite while the other worker sat idle. Instead: the integration modules that hold a solo test
  first, each with its solo tests first (the two dealt at the start run their solo tests one after the
  other, and neither waits for a long test of the other worker to end), then the other integration
  modules longest first, then the unit tests (hundreds of sub-second tests that fill whatever gap is left
  at the end), and last the solo unit tests, beside short tests or nothing.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

INTEGRATION = Path(__file__).resolve().parent / "integration"
DEFAULT_TIMEOUT_S = {"unit": 120, "integration": 600}
# Integration modules, longest first by CI's --durations (a module fixture's run counted once; the fault
# suite's one test waits out three hangs): dealt first, a long one can no longer be what one worker runs
# alone at the end. A module not named here is dealt after these and before the unit tests; a name that no
# longer exists orders nothing.
LONGEST_FIRST = (
    "test_faults.py", "test_bench_smoke.py", "test_bench_clusters.py", "test_multi_run.py", "test_isolation.py",
    "test_compare.py", "test_tune.py", "test_workloads.py", "test_launch_unmodified.py", "test_ssh_hosts.py",
    "test_launch_ps.py",
    "test_slurm.py",
    "test_ps.py", "test_faults_disk.py",
)


def _tensorflow_installed() -> bool:
    # find_spec, not import: importing TensorFlow costs seconds and this runs in every session
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except ImportError:  # a broken or blocked installation counts as none
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    have_tf = _tensorflow_installed()
    for item in items:
        integration = INTEGRATION in Path(str(item.fspath)).resolve().parents
        if integration:
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.tf)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT_S["integration" if integration else "unit"]))
        if not have_tf and item.get_closest_marker("tf") is not None:
            item.add_marker(pytest.mark.skip(reason="needs TensorFlow (pip install -e '.[test]' installs it)"))
    _dispatch_order(items)


def _dispatch_order(items: list[pytest.Item]) -> None:
    """Sort ``items`` into the order their files are dealt to the xdist workers (the module docstring says
    why); a module's other tests keep their order."""
    paths = [Path(str(item.fspath)).resolve() for item in items]
    solo = {id(item): item.get_closest_marker("solo") is not None for item in items}
    seen: dict[Path, int] = {}
    with_solo: set[Path] = set()
    for path, item in zip(paths, items, strict=True):
        seen.setdefault(path, len(seen))
        if solo[id(item)]:
            with_solo.add(path)

    def rank(path: Path) -> tuple[int, int]:
        if INTEGRATION not in path.parents:
            return (3, 0) if path in with_solo else (2, 0)
        longest = LONGEST_FIRST.index(path.name) if path.name in LONGEST_FIRST else len(LONGEST_FIRST)
        return (0 if path in with_solo else 1, longest)

    keys = {id(item): (*rank(path), seen[path], not solo[id(item)]) for path, item in zip(paths, items, strict=True)}
    items.sort(key=lambda item: keys[id(item)])


LOCK_DIR_VAR = "PERFKIT_TEST_LOCK_DIR"  # the run's lock files: made by the controller, inherited by workers
_made_lock_dir: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    _restore_stop_signals()
    if not hasattr(config, "workerinput") and LOCK_DIR_VAR not in os.environ:  # the controller (or -n 0)
        _made_lock_dir.append(tempfile.mkdtemp(prefix="perfkit-pytest-"))
        os.environ[LOCK_DIR_VAR] = _made_lock_dir[0]


def _restore_stop_signals() -> None:
    """A suite started in the background without job control (``cmd &`` in a script, ``nohup``) has SIGINT
    and SIGHUP ignored, and every ``perfkit`` a test starts inherits that: Python keeps an inherited
    SIG_IGN, so a test that stops a run with SIGINT (Ctrl-C) would wait for nothing and fail. The suite
    restores what a terminal gives; perfkit itself rightly keeps what it inherits."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_unconfigure(config: pytest.Config) -> None:
    while _made_lock_dir:
        shutil.rmtree(_made_lock_dir.pop(), ignore_errors=True)
        os.environ.pop(LOCK_DIR_VAR, None)


@contextmanager
def _share(solo: bool) -> Iterator[None]:
    """Shared for an ordinary test, exclusive for a solo one, across this run's xdist workers. A turnstile
    taken first keeps a waiting solo test from being overtaken by new shared holders (no starvation)."""
    folder = os.environ.get(LOCK_DIR_VAR)
    if not os.environ.get("PYTEST_XDIST_WORKER") or not folder:  # not under xdist: one test at a time already
        yield
        return
    with open(Path(folder) / "turnstile", "a") as turnstile, open(Path(folder) / "lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if solo else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # around setup, call and teardown: a module fixture's run (set up by its first test) is covered too
    with _share(item.get_closest_marker("solo") is not None):
        yield
