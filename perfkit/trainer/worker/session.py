"""The start-up hook's recorder of one launched worker process: which part it writes (a Keras ``fit``'s or
a custom loop's), the calls ``auto``'s patches hand it, and the end of the process."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfkit.errors import UsageError
from perfkit.trainer.worker.chooser import StepChooser

if TYPE_CHECKING:
    from perfkit.trainer.worker.loop import LoopPart

log = logging.getLogger(__name__)

CLAIM_FILE = ".recorder-claim"


class _State:
    """This process's recording: the launched worker's session (None without the hook) and whether a
    Keras ``fit`` is running (the custom-loop watch stands aside inside one)."""

    def __init__(self) -> None:
        self.session: Any = None
        self.fit_depth = 0
        self.lock = threading.Lock()


STATE = _State()


def global_batch_of(x: Any, batch_size: Any = None) -> int | None:
    """Samples per step over all workers, from what ``fit`` (or a strategy) is given: a ``tf.data`` pipeline's
    batch, a distributed dataset's, or ``batch_size`` (Keras' default 32) for arrays; None when unreadable
    (a generator, a Sequence)."""
    if x is None:
        return None
    dataset = getattr(x, "_original_dataset", x)  # a strategy's distributed dataset
    if hasattr(dataset, "element_spec") and hasattr(dataset, "_variant_tensor"):
        return dataset_batch(dataset)
    if hasattr(x, "shape") or isinstance(x, (list, tuple, dict)):
        return int(batch_size) if isinstance(batch_size, int) and batch_size > 0 else 32
    return None


def dataset_batch(dataset: Any) -> int | None:
    """The batch size of the nearest ``batch`` stage up a ``tf.data`` pipeline, if there is one."""
    seen = 0
    while dataset is not None and seen < 64:
        size = getattr(dataset, "_batch_size", None)
        if size is not None:
            try:
                value = int(_static(size))
            except (TypeError, ValueError):
                return None
            return value if value > 0 else None
        dataset, seen = getattr(dataset, "_input_dataset", None), seen + 1
    return None


def _static(size: Any) -> Any:
    """A batch size's value: a number, an eager tensor's, or a graph tensor's constant (a dataset built inside a
    tf.function, as ParameterServerStrategy's per-worker datasets are)."""
    if hasattr(size, "numpy"):
        return size.numpy()
    if hasattr(size, "graph"):
        from tensorflow import get_static_value

        return get_static_value(size)
    return size


def in_fit() -> bool:
    return STATE.fit_depth > 0


def claim(worker_dir: Path) -> bool:
    """The first process of this worker to train records it; any other (a child, a wrapper) stands aside."""
    try:
        worker_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(worker_dir / CLAIM_FILE, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        log.info("perfkit: another process of this worker records it; pid %d is not recorded", os.getpid())
        return False
    except OSError as exc:
        log.warning("perfkit: cannot record this worker (%s: %s)", worker_dir, exc.strerror)
        return False
    with os.fdopen(fd, "w") as out:
        out.write(f"{os.getpid()}\n")
    return True


class Session:
    def __init__(self, run_dir: Path, index: int, step_function: str | None) -> None:
        self.run_dir, self.index = run_dir, index
        self.chooser = StepChooser(named=step_function)
        self.claimed: bool | None = None
        self.fit: Any = None
        self.loop: LoopPart | None = None
        self.coord: Any = None  # a ParameterServerStrategy chief's part (worker/coordinated.py)
        self.batch: int | None = None  # a strategy's distributed dataset's global batch
        self.iterated_batch: int | None = None  # else the last dataset iterated before the first step
        self._local = threading.local()
        self._exc: BaseException | None = None

    # -- Keras fit ------------------------------------------------------------------------------------
    def fit_part(self, batch: int | None, callback_base: type) -> Any:
        """The part a Keras ``fit`` records into: the process's first fit only, and only if no custom loop
        was found first."""
        if self.fit is not None:
            self.fit.status.write(warning="a later fit of this process was not recorded (only the first is)")
            return None
        if self.loop is not None or not self._claim():
            return None
        from perfkit.profiler.steps import StepLog
        from perfkit.trainer.worker.fitpart import WorkerPart

        ctx = self._context()
        if ctx is None:
            return None
        self.fit = WorkerPart(ctx, StepLog(samples_per_step=0), None, callback_base)
        self.fit.fit_given(batch)
        return self.fit

    def fit_ended(self, exc: BaseException | None) -> None:
        if self.fit is not None and not self.fit.ended:
            self.fit.end(exc)
        if self.coord is not None and self.coord.keras:
            self.coord.end(exc)

    # -- a ParameterServerStrategy chief --------------------------------------------------------------
    def coordinated(self, keras: bool) -> Any:
        """The part of a chief whose steps ``ClusterCoordinator`` runs on the workers (Keras fit under
        ParameterServerStrategy, or a custom loop that schedules its steps); made on first use."""
        if self.coord is not None:
            return self.coord
        if self.fit is not None or self.loop is not None or not self._claim():
            return None
        ctx = self._context()
        if ctx is None:
            self.claimed = False
            return None
        from perfkit.trainer.worker.coordinated import CoordinatorPart

        self.coord = CoordinatorPart(ctx, self.chooser.named, keras)
        self.coord.batch_seen(self.batch)
        if not keras:  # a custom loop ends with the process
            self._at_end()
        return self.coord

    # -- a custom loop --------------------------------------------------------------------------------
    def _watching(self) -> bool:
        return (not in_fit() and not getattr(self._local, "depth", 0) and self.fit is None
                and self.coord is None and self.claimed is not False)

    @contextlib.contextmanager
    def _inside(self, fn: Any = None) -> Any:
        self._local.depth, self._local.current = 1, fn
        try:
            yield
        finally:
            self._local.depth, self._local.current = 0, None

    def function_call(self, original: Any, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self._watching():
            return original(fn, *args, **kwargs)
        step = self.chooser.is_step(fn)
        marker = self.loop.before_step() if step and self.loop is not None else contextlib.nullcontext()
        start = time.monotonic_ns()
        with self._inside(fn), marker:
            out = original(fn, *args, **kwargs)
        end = time.monotonic_ns()
        steps = self.chooser.called(fn, start, end)
        if steps and (self.loop is not None or self._start_loop()):
            for s, e in steps:
                self.loop.step(s, e)  # type: ignore[union-attr]
        return out

    def strategy_run(self, original: Any, strategy: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        current = getattr(self._local, "current", None)
        if current is not None and not in_fit():
            self.chooser.strategy_run(current)
        return original(strategy, *args, **kwargs)

    def distribute(self, original: Any, strategy: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        dataset = args[0] if args else kwargs.get("dataset")
        if self.batch is None and not in_fit():
            self.batch = global_batch_of(dataset)
        return original(strategy, *args, **kwargs)

    def from_function(self, original: Any, strategy: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        make = args[0] if args else kwargs.pop("dataset_fn")

        def dataset_fn(context: Any) -> Any:
            dataset = make(context)
            per_replica = dataset_batch(dataset)
            replicas = int(getattr(context, "num_replicas_in_sync", 1))
            if self.batch is None and per_replica and (not in_fit() or self.coord is not None):
                self.batch = per_replica * replicas
                if self.coord is not None:  # a ParameterServerStrategy fit reads its dataset inside fit
                    self.coord.batch_seen(self.batch)
            elif per_replica and in_fit() and self.fit is not None:  # fit given a DatasetCreator: read here
                self.fit.fit_given(per_replica * replicas)
            return dataset

        return original(strategy, dataset_fn, *args[1:], **kwargs)

    def new_iterator(self, original: Any, dataset: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self._watching():
            return original(dataset, *args, **kwargs)
        if self.loop is not None:
            self.loop.boundary()
        elif self.batch is None:
            self.iterated_batch = global_batch_of(dataset)
        with self._inside():
            return original(dataset, *args, **kwargs)

    def metric_reset(self, original: Any, metric: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.loop is not None and self._watching():
            self.loop.boundary()
        return original(metric, *args, **kwargs)

    def _start_loop(self) -> bool:
        if not self._claim():
            return False
        ctx = self._context()
        if ctx is None:
            self.claimed = False
            return False
        from perfkit.trainer.worker.loop import LoopPart

        self.loop = LoopPart(ctx, self.batch or self.iterated_batch, self.chooser)
        self._at_end()
        return True

    def _at_end(self) -> None:
        """The part is saved when the process ends, with the script's exception if it raised one."""
        # Registered now, after TensorFlow's own exit handlers: ours run first, while TF can still stop a capture.
        atexit.register(self._at_exit)
        previous = sys.excepthook

        def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
            self._exc = value
            previous(kind, value, tb)

        sys.excepthook = excepthook

    def _at_exit(self) -> None:
        part = self.loop if self.loop is not None else self.coord
        if part is not None:
            try:
                part.end(self._exc)
            except Exception as exc:  # noqa: BLE001 - the script's exit status is its own
                log.warning("perfkit: could not save the custom loop's records: %s: %s", type(exc).__name__, exc)

    # -- both -----------------------------------------------------------------------------------------
    def _claim(self) -> bool:
        if self.claimed is None:
            self.claimed = claim(self.run_dir / "workers" / str(self.index))
        return self.claimed

    def _context(self) -> Any:
        from perfkit.trainer.worker.fitpart import Context

        try:
            return Context.from_launcher(self.run_dir, self.index)
        except UsageError as exc:
            log.warning("perfkit: not recording this process: %s", exc)
            return None
