"""A TF profiler capture window around a few training steps, and where each worker's capture landed.

``TraceCapture`` is plain Python (testable without TensorFlow): it is told about step boundaries and calls
injected start/stop functions. ``keras_callbacks`` wraps it for tf-keras. Profiling never breaks training:
every failure of the profiler is logged and recorded, never raised, and a capture only ever stops a
profiler session it started itself (the user may run their own).

TensorFlow writes a capture as ``<logdir>/plugins/profile/<timestamp>/<hostname>.xplane.pb``. Several
workers on one host would overwrite each other and each worker would get its own timestamp, so every worker
captures into a private directory and the file is then moved to
``tensorboard/plugins/profile/<session>/<host>-w<i>.xplane.pb``: one session with one host entry per worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit import _libc
from perfkit._atomic import disk_refuses
from perfkit.errors import UsageError

log = logging.getLogger(__name__)

PROFILE_DIR = Path("tensorboard") / "plugins" / "profile"
# Fault injection for the tests of the crash recovery: a file path; the first process whose stop creates
# it dies by SIGSEGV where TF 2.21's profiler does (docs/tf-profiler-crash.md). Never set by perfkit.
CRASH_IN_STOP_ENV = "PERFKIT_TEST_CRASH_IN_STOP"
_WINDOW = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
AUTO_LENGTH = 10


@dataclass(frozen=True)
class Window:
    """Global training steps ``first..last``, 1-based and inclusive (as Keras' ``profile_batch``)."""

    first: int
    last: int

    @property
    def length(self) -> int:
        return self.last - self.first + 1

    def to_dict(self) -> dict[str, int]:
        return {"first": self.first, "last": self.last}


def check_spec(spec: str) -> str:
    """``auto``, ``off`` or ``A-B`` with 1 <= A <= B; anything else is a usage error."""
    spec = spec.strip().lower()
    if spec in ("auto", "off"):
        return spec
    m = _WINDOW.match(spec)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise UsageError(f"--profile-steps: {spec!r} is not 'A-B' with 1 <= A <= B (global step numbers), "
                         "'auto' or 'off'")
    return f"{int(m.group(1))}-{int(m.group(2))}"


def resolve(spec: str, steps_per_epoch: int, epochs: int, steps_per_execution: int = 1) -> Window | None:
    """The window a spec means for this run, in steps (executions: ``steps_per_epoch`` of them an epoch,
    ``steps_per_execution`` K batches each); ``auto`` is 10 batches early in the second epoch (the first
    epoch pays for tracing and warm-up), or in the first when there is only one.

    ``auto`` counts batches, not executions: tracing costs per batch traced (~30 ms and ~0.3 MB each, in
    this project's records) and stopping per MB written, so 10 executions of K = 8 batches traced 42 of an
    epoch's 58 batches, ended with the epoch and put a 3 s stop into its validation: a run with K = 8 then
    measured 0.89x the default when untraced it was 1.12x (docs/tuning.md)."""
    spec = check_spec(spec)
    total = steps_per_epoch * epochs
    if spec == "off":
        return None
    if spec == "auto":
        k = max(1, int(steps_per_execution))
        epoch_start = steps_per_epoch if epochs > 1 else 0
        skip = min(-(-2 // k), max(0, steps_per_epoch - 1))  # the first batches after validation run cold
        first = epoch_start + skip + 1
        return Window(first, min(first + -(-AUTO_LENGTH // k) - 1, epoch_start + steps_per_epoch))
    first, last = (int(x) for x in spec.split("-"))
    if last > total:
        raise UsageError(f"--profile-steps: {spec} ends after the last training step ({total} = "
                         f"{epochs} epochs x {steps_per_epoch} steps)")
    return Window(first, last)


def executions_per_epoch(steps_per_epoch: int, steps_per_execution: int = 1) -> int:
    """Calls of the training function per epoch when each runs ``steps_per_execution`` batches (Keras'
    ``compile(steps_per_execution=K)``; the last call of an epoch runs what is left). With K > 1 a "step" of
    the trace window, of the step records and of the trace (tf-keras' ``train`` marker) is one execution."""
    k = max(1, int(steps_per_execution))
    return -(-int(steps_per_epoch) // k)


def later_window(window: Window, done_steps: int, steps_per_epoch: int, epochs: int) -> Window | None:
    """The same window moved by whole epochs so that it starts after ``done_steps`` (the steps already
    trained), or None when no epoch is left for it: where a lost capture is tried again."""
    shift = max(0, -(-(done_steps + 1 - window.first) // steps_per_epoch))
    moved = Window(window.first + shift * steps_per_epoch, window.last + shift * steps_per_epoch)
    return moved if moved.last <= steps_per_epoch * epochs else None


@dataclass(frozen=True)
class CaptureTarget:
    run_dir: Path
    session: str
    host_name: str  # "<host>-w<i>": the host entry TensorBoard shows

    @property
    def private_dir(self) -> Path:
        return self.run_dir / "tensorboard" / f".capture-{self.host_name}"

    @property
    def final_path(self) -> Path:
        return self.run_dir / PROFILE_DIR / self.session / f"{self.host_name}.xplane.pb"


class TraceCapture:
    """Starts the profiler just before step ``window.first`` and stops it once ``window.last`` is done.

    A capture that fails without killing the process (the profiler raised, or wrote no file) is tried
    again, up to ``retries`` times, in the next epoch that still has room for the window; every attempt's
    outcome stays in ``result["attempts"]``.
    """

    def __init__(self, window: Window, target: CaptureTarget, start: Callable[[str], None],
                 stop: Callable[[], None], on_change: Callable[[dict[str, Any]], None] | None = None,
                 retries: int = 0, steps_per_epoch: int = 0, epochs: int = 0) -> None:
        self.window, self.target = window, target
        self._start, self._stop = start, stop
        # Told before the profiler starts and stops and when the capture ends: TF 2.21's profiler can
        # crash the process in Stop() under MultiWorkerMirroredStrategy (docs/tf-profiler-crash.md), and
        # whoever supervises the process needs to know a death happened inside a capture.
        self._on_change = on_change
        self._retries, self._spe, self._epochs = retries, steps_per_epoch, epochs
        self._active = False
        self._last_done = 0
        self.result: dict[str, Any] = {"status": "pending", "window": window.to_dict(), "file": None, "error": None}

    @property
    def active(self) -> bool:
        """The profiler runs (started by this capture)."""
        return self._active

    def step_begin(self, global_step: int) -> None:
        if global_step == self.window.first:
            self._begin()
        elif global_step > self.window.last and self._active:
            self.finish()

    def step_end(self, global_step: int, last_of_epoch: bool = False) -> None:
        # Keras closes a step's "train" marker only after this hook returns, so the capture stops at the
        # next step's start or at the epoch's end, never here: stopping now would lose the last step.
        self._last_done = global_step
        if global_step == self.window.first - 1 and not last_of_epoch:
            # Starting between two steps keeps the profiler's start-up cost out of the first traced step
            # (this callback runs after the step recorder); not across an epoch end, or validation would
            # be traced too.
            self._begin()

    def epoch_boundary(self) -> None:
        """Validation or the epoch's end: stop a capture whose window is complete before it starts."""
        if self._active and self._last_done >= self.window.last:
            self.finish()

    def _begin(self) -> None:
        if self.result["status"] != "pending":
            return
        try:
            # A worker killed in an earlier attempt's capture may have left a partial file here.
            shutil.rmtree(self.target.private_dir, ignore_errors=True)
            self.target.private_dir.mkdir(parents=True, exist_ok=True)
            self._set(status="starting")
            self._start(str(self.target.private_dir))
            self._active = True
            self._set(status="capturing", t_start_wall_ns=time.time_ns())
        except Exception as exc:  # noqa: BLE001 - profiling never breaks training
            self._fail("could not start the profiler", exc)

    def _set(self, **fields: Any) -> None:
        self.result.update(fields)
        if self._on_change is not None:
            try:
                self._on_change(dict(self.result))
            except Exception as exc:  # noqa: BLE001
                log.warning("profiling: could not report the capture state: %s", exc)

    def finish(self) -> None:
        """Stop a capture still running (training ended inside the window) and collect its file."""
        if not self._active:
            if self.result["status"] == "pending":
                self._set(status="skipped", error="training ended before the window began")
            return
        self._active = False
        self._set(status="stopping", t_end_wall_ns=time.time_ns())
        try:
            self._stop()
        except Exception as exc:  # noqa: BLE001
            self._fail("could not stop the profiler", exc)
            return
        self._collect()

    def _collect(self) -> None:
        found = sorted(self.target.private_dir.glob("plugins/profile/*/*.xplane.pb"))
        if not found:
            self._fail("the profiler wrote no .xplane.pb", None)
            return
        refused = disk_refuses(found[-1].parent)
        if refused:  # TF writes the capture in place: on a disk that filled meanwhile it may be cut short
            self._fail(f"the capture may be incomplete, its disk refuses writes: {refused}", None)
            return
        try:
            final = self.target.final_path
            final.parent.mkdir(parents=True, exist_ok=True)
            found[-1].replace(final)
            shutil.rmtree(self.target.private_dir, ignore_errors=True)
        except OSError as exc:
            self._fail("could not move the capture into place", exc)
            return
        rel = final.relative_to(self.target.run_dir).as_posix()
        self._set(status="captured", file=rel, bytes=final.stat().st_size)
        log.info("profiler capture of steps %d-%d written to %s", self.window.first, self.window.last, rel)

    def _fail(self, what: str, exc: BaseException | None) -> None:
        text = what if exc is None else f"{what}: {type(exc).__name__}: {exc}"
        log.warning("profiling: %s; training goes on", text)
        shutil.rmtree(self.target.private_dir, ignore_errors=True)
        self._set(status="failed", error=text[:500])
        later = later_window(self.window, self._last_done, self._spe, self._epochs) if self._spe else None
        if self._retries > 0 and later is not None:
            self._retries -= 1
            lost = {k: self.result.get(k) for k in ("status", "error", "window")}
            self.window = later
            self.result = {"status": "pending", "window": later.to_dict(), "file": None, "error": None,
                           "attempts": [*self.result.get("attempts", []), lost]}
            log.info("profiling: trying the window again at steps %d-%d", later.first, later.last)


def _tf_start(logdir: str) -> None:
    from perfkit._tf import tf

    # TF 2.21 ignores ProfilerOptions passed here (it logs "host_tracer_level expects an i value"), and its
    # defaults are what a CPU step needs: host ops at level 2, no Python tracer.
    tf().profiler.experimental.start(logdir)


def _tf_stop() -> None:
    from perfkit._tf import tf

    _injected_crash()
    with freed_memory_poisoned():
        tf().profiler.experimental.stop()


POISON_ENV = "PERFKIT_PROFILER_POISON"  # "0" turns the guard below off (to measure it)
POISON_BYTE = 0xA5


@contextlib.contextmanager
def freed_memory_poisoned() -> Iterator[None]:
    """While TF's profiler stops, glibc overwrites every block it frees (outside its small per-thread
    cache). TF 2.21's ``TraceMeRecorder::Consume`` follows pointers into blocks it has just freed and
    writes through them when what it reads there still matches (docs/tf-profiler-crash.md); poisoned
    blocks no longer match, so most of those writes, which corrupt the heap, do not happen. The cost, a
    memset per allocation and free, is paid only during the stop."""
    if os.environ.get(POISON_ENV, "1") == "0" or not _libc.set_malloc_perturb(POISON_BYTE):
        yield
        return
    try:
        yield
    finally:
        _libc.set_malloc_perturb(0)


def _injected_crash() -> None:
    path = os.environ.get(CRASH_IN_STOP_ENV)
    if not path:
        return
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGSEGV)


def tf_capture(window: Window, target: CaptureTarget, on_change: Callable[[dict[str, Any]], None] | None = None,
               retries: int = 0, steps_per_epoch: int = 0, epochs: int = 0) -> TraceCapture:
    return TraceCapture(window, target, _tf_start, _tf_stop, on_change, retries, steps_per_epoch, epochs)


def keras_callback(capture: TraceCapture, steps_per_epoch: int, base: type | None = None,
                   markers: bool = False, steps_per_execution: int = 1) -> Any:
    """A Keras Callback telling ``capture`` the global step number (1-based) around each step; it must come
    after the step recorder in the callback list, so profiler start/stop fall between recorded steps.
    ``markers``: wrap each traced step in the ``train`` marker tf-keras emits itself and Keras 3 does not.
    ``steps_per_epoch`` counts batches; with ``steps_per_execution`` K > 1 Keras calls the batch hooks once
    per execution (begin with its first batch, end with its last), and the capture is told executions:
    global step = epoch x executions per epoch + first batch // K + 1 (``executions_per_epoch``)."""
    from perfkit._tf import keras

    k = max(1, int(steps_per_execution))
    per_epoch = executions_per_epoch(steps_per_epoch, k)

    class _TraceWindow(base or keras().callbacks.Callback):  # type: ignore[misc]
        _supports_tf_logs = True  # it reads no logs

        def __init__(self) -> None:
            super().__init__()
            self._epoch = 0
            self._marker: Any = None

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._epoch = epoch

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            capture.step_begin(self._epoch * per_epoch + batch // k + 1)
            if markers and capture.active:
                from perfkit._tf import tf

                self._marker = tf().profiler.experimental.Trace("train", epoch_num=self._epoch, step_num=batch, _r=1)
                self._marker.__enter__()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if self._marker is not None:
                self._marker.__exit__(None, None, None)
                self._marker = None
            # ``batch`` is the execution's last batch: // K gives the execution it ends (a short last one too).
            capture.step_end(self._epoch * per_epoch + batch // k + 1, last_of_epoch=batch + 1 == steps_per_epoch)

        def on_test_begin(self, logs: Any = None) -> None:
            capture.epoch_boundary()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            capture.epoch_boundary()

        def on_train_end(self, logs: Any = None) -> None:
            capture.finish()

    return _TraceWindow()


# After a run: where each worker's capture landed goes into run.json -> ``profile``. Nothing is parsed here:
# the captures are read by the analysis (``perfkit.analysis.tracetables``), so a parser fix reaches old runs.
def finish_traces(run: Any, spec: str, captures: dict[str, dict[str, Any]]) -> None:
    """Record the captures of ``run`` (a RunDir) in run.json (``spec``: the window asked for, e.g. "auto");
    parsing them is left to the analysis."""
    profile: dict[str, Any] = {"spec": spec}
    window = next((c.get("window") for _, c in sorted(captures.items()) if c.get("window")), None)
    if window is not None:
        profile["window"] = window
    profile["workers"] = {k: dict(v) for k, v in captures.items()}
    try:
        run.update(profile=profile)
    except OSError as exc:  # the training records are already safe on disk
        log.warning("could not record the profiler captures in run.json: %s", exc)
