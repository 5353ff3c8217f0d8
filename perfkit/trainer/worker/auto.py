"""Recording a launched script that does not import perfkit: what perfkit's start-up hook
(``startup/sitecustomize.py``) installs in the interpreter ``perfkit launch`` starts.

Nothing is imported here until the script imports it. Once it does:
- Keras ``Model.fit`` (tf-keras and Keras 3) gets perfkit's callbacks added to its own, the global batch read
  from what ``fit`` is given; a ``fit`` that already carries ``perfkit.record``'s callbacks is left alone (the
  script is recorded once, and ``perfkit.record()`` learns its batch the same way);
- outside ``fit``, TensorFlow's ``tf.function`` calls, ``Strategy.run``, dataset iterators and metric resets
  are watched to find a custom loop's training step (``perfkit.trainer.worker.loop``).

Only the first process of a worker to start training records it (``.recorder-claim`` in its worker
directory): a launcher script, or a child that also imports TensorFlow, does not write the same part twice.
Every patch passes the script's arguments, return values and exceptions through unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfkit.trainer.worker import checkpoints, imports
from perfkit.trainer.worker.env import AUTO_VAR, INDEX_VAR, RUN_DIR_VAR, STEP_FUNCTION_VAR
from perfkit.trainer.worker.session import STATE, Session, global_batch_of

log = logging.getLogger(__name__)


def install_from_env() -> None:
    """The start-up hook's entry: record this interpreter if perfkit launch asked for it."""
    if os.environ.get(AUTO_VAR) != "1":
        return
    run_dir, index = os.environ.get(RUN_DIR_VAR), os.environ.get(INDEX_VAR)
    if not run_dir or not (index or "").isdigit():
        return
    STATE.session = Session(Path(run_dir), int(index or 0), os.environ.get(STEP_FUNCTION_VAR) or None)
    install_fit_patch()
    imports.when_imported("tensorflow", lambda tf: _patch_tf(STATE.session))


def install_fit_patch() -> None:
    """``Model.fit`` of whichever Keras the script imports learns its global batch (and, under the hook,
    gets perfkit's callbacks). Also used by ``perfkit.record()`` without a batch."""
    imports.when_imported("tf_keras", lambda m: _patch_fit(m.Model, m.callbacks.Callback))
    imports.when_imported("keras", lambda m: _patch_fit(m.Model, m.callbacks.Callback))


def _patch_fit(model_class: type, callback_base: type) -> None:
    original = model_class.fit
    if getattr(original, "_perfkit", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _fit(original, signature, callback_base, self, args, kwargs)

    fit._perfkit = True  # type: ignore[attr-defined]
    model_class.fit = fit  # type: ignore[method-assign]


def _fit(original: Any, signature: inspect.Signature, callback_base: type, model: Any, args: tuple[Any, ...],
         kwargs: dict[str, Any]) -> Any:
    try:
        bound = signature.bind(model, *args, **kwargs)
    except TypeError:  # Keras says what is wrong with the call, not perfkit
        return original(model, *args, **kwargs)
    from perfkit.trainer.worker.fitpart import PART_ATTR

    given = bound.arguments
    callbacks = list(given.get("callbacks") or [])
    batch = global_batch_of(given.get("x"), given.get("batch_size"))
    owner = next((getattr(c, PART_ATTR) for c in callbacks if hasattr(c, PART_ATTR)), None)
    part = None
    if owner is not None:
        owner.fit_given(batch)  # perfkit.record's callbacks already there: recorded once
    elif STATE.session is not None and not STATE.fit_depth and _coordinated(model):
        coord = STATE.session.coordinated(keras=True)
        if coord is not None and coord.keras:
            coord.batch_seen(batch)
            bound.arguments["callbacks"] = callbacks + coord.callbacks(callback_base)
    elif STATE.session is not None and not STATE.fit_depth:
        part = STATE.session.fit_part(batch, callback_base)
        if part is not None:
            bound.arguments["callbacks"] = callbacks + part.callbacks()
    STATE.fit_depth += 1
    try:
        with _device_datasets(part or owner):
            out = original(*bound.args, **bound.kwargs)
    except BaseException as exc:
        if part is not None or (STATE.session is not None and STATE.session.coord is not None):
            STATE.session.fit_ended(exc)
        raise
    finally:
        STATE.fit_depth -= 1
    if part is not None or (STATE.session is not None and STATE.session.coord is not None):
        STATE.session.fit_ended(None)
    return out


def _coordinated(model: Any) -> bool:
    """The model trains under ParameterServerStrategy: its steps are scheduled on the workers."""
    return bool(getattr(getattr(model, "distribute_strategy", None), "_should_use_with_coordinator", False))


@contextlib.contextmanager
def _device_datasets(recorder: Any) -> Iterator[None]:
    """A recorded fit builds the strategy's per-device datasets without tf.data's autotuner, as perfkit's own
    workers do (``workloads/pipeline.py``): TensorFlow's own generator and one-element prefetch, nothing to
    tune, whose autotuner thread can hold the end of fit up to a minute more (docs/troubleshooting.md); the
    script's own pipeline is left as it is. What was applied goes into the recorder's plan."""
    if recorder is None:
        yield
        return
    from perfkit.workloads.pipeline import device_datasets_without_autotune

    with device_datasets_without_autotune() as applied:
        recorder.device_datasets(applied)
        yield


def _patch_tf(session: Any) -> None:
    """Where a custom loop shows itself: tf.function calls, Strategy.run, distributed datasets, iterators."""
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.distribute import distribute_lib, input_lib
    from tensorflow.python.eager.polymorphic_function import polymorphic_function

    call = polymorphic_function.Function.__call__
    polymorphic_function.Function.__call__ = _wrap(call, lambda orig, fn, a, k: session.function_call(orig, fn, a, k))
    base = distribute_lib.StrategyBase
    base.run = _wrap(base.run, lambda orig, s, a, k: session.strategy_run(orig, s, a, k))
    distribute = base.experimental_distribute_dataset
    base.experimental_distribute_dataset = _wrap(distribute, lambda orig, s, a, k: session.distribute(orig, s, a, k))
    from_fn = base.distribute_datasets_from_function
    base.distribute_datasets_from_function = _wrap(from_fn, lambda orig, s, a, k: session.from_function(
        orig, s, a, k))
    for cls in (dataset_ops.DatasetV2, input_lib.DistributedDataset, input_lib.DistributedDatasetsFromFunction):
        cls.__iter__ = _wrap(cls.__iter__, lambda orig, d, a, k: session.new_iterator(orig, d, a, k))
    imports.when_imported("tf_keras", lambda m: _patch_metrics(m.metrics.Metric, session))
    imports.when_imported("keras", lambda m: _patch_metrics(m.metrics.Metric, session))
    checkpoints.install_tf()  # the script's checkpoint saves: the goodput ledger's checkpoint bucket
    imports.when_imported("tf_keras", checkpoints.install_keras)
    imports.when_imported("keras", checkpoints.install_keras)
    _patch_coordinator(session)


def _patch_coordinator(session: Any) -> None:
    """ParameterServerStrategy's ``ClusterCoordinator``: each step it schedules, the worker that runs it and
    how long, and a custom loop's ``join`` (``worker/coordinated.py``).

    A step's outcome is read where TensorFlow decides it, in the closure queue its worker thread reports to:
    ``mark_finished`` once the result is back on the chief, ``put_back`` (to run elsewhere) or ``mark_failed``.
    Whether ``execute_on`` returned is not enough: the worker can die while its result is being fetched, after
    the step ran, and TensorFlow then runs the step again on another worker."""
    from tensorflow.python.distribute.coordinator import cluster_coordinator as cc

    closure = cc.Closure
    closure.__init__ = _wrap(closure.__init__, lambda orig, c, a, k: _closure_made(orig, c, a, k, closure, session))
    closure.execute_on = _wrap(closure.execute_on, _closure_executed)
    worker = cc.Worker
    worker._process_closure = _wrap(worker._process_closure, lambda orig, w, a, k: _closure_run(orig, w, a, k, session))
    queue = cc._CoordinatedClosureQueue
    queue.mark_finished = _wrap(queue.mark_finished, lambda orig, q, a, k: _outcome(orig, q, a, k, "finished"))
    queue.put_back = _wrap(queue.put_back, lambda orig, q, a, k: _outcome(orig, q, a, k, "lost"))
    queue.mark_failed = _wrap(queue.mark_failed, lambda orig, q, a, k: _outcome(orig, q, a, k, "lost"))
    coordinator = cc.ClusterCoordinator
    coordinator.join = _wrap(coordinator.join, lambda orig, c, a, k: _joined(orig, c, a, k, session))


def _closure_made(orig: Any, closure: Any, args: tuple[Any, ...], kwargs: dict[str, Any], step_type: type,
                  session: Any) -> None:
    orig(closure, *args, **kwargs)
    if type(closure) is not step_type:  # a per-worker resource (a dataset, an iterator), not a step
        return
    try:
        part = session.coordinated(keras=bool(STATE.fit_depth))
        fn = args[0] if args else kwargs.get("function")
        closure._perfkit_tag = part.closure_made(fn) if part is not None else None
    except Exception:  # noqa: BLE001 - profiling never breaks training
        log.exception("perfkit: could not record a scheduled step")


class _Running(threading.local):
    """The step this coordinator thread is running, until its closure queue hears how it ended."""

    step: tuple[Any, int, Any, int] | None = None  # (part, worker, tag, start_ns)
    error: BaseException | None = None


_RUNNING = _Running()


def _closure_run(orig: Any, worker: Any, args: tuple[Any, ...], kwargs: dict[str, Any], session: Any) -> Any:
    closure = args[0] if args else kwargs.get("closure")
    tag, part = getattr(closure, "_perfkit_tag", None), session.coord
    if tag is None or part is None:
        return orig(worker, *args, **kwargs)
    _RUNNING.step = (part, int(getattr(worker, "worker_index", -1)), tag, time.monotonic_ns())
    _RUNNING.error = None
    try:
        return orig(worker, *args, **kwargs)
    finally:
        _RUNNING.step = None


def _closure_executed(orig: Any, closure: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return orig(closure, *args, **kwargs)
    except BaseException as exc:
        _RUNNING.error = exc
        raise


def _outcome(orig: Any, queue: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outcome: str) -> Any:
    """Recorded as TensorFlow decides, not when the thread returns: after a lost worker the thread may wait
    for it to come back until the end of the run."""
    step, _RUNNING.step = _RUNNING.step, None
    if step is not None:
        part, worker, tag, start = step
        if outcome == "finished":
            _quietly(part.executed, worker, tag, start, time.monotonic_ns())
        else:
            error = _RUNNING.error or (args[0] if args and isinstance(args[0], BaseException) else None)
            _quietly(part.failed, worker, error or RuntimeError("the worker was lost while its result was fetched"))
    return orig(queue, *args, **kwargs)


def _joined(orig: Any, coordinator: Any, args: tuple[Any, ...], kwargs: dict[str, Any], session: Any) -> Any:
    out = orig(coordinator, *args, **kwargs)
    if session.coord is not None and not STATE.fit_depth:
        _quietly(session.coord.joined)
    return out


def _quietly(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - profiling never breaks training
        log.exception("perfkit: could not record the coordinator's step")


def _wrap(original: Any, handler: Any) -> Any:
    if getattr(original, "_perfkit", False):
        return original

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return handler(original, self, args, kwargs)

    wrapper._perfkit = True  # type: ignore[attr-defined]
    return wrapper


def _patch_metrics(metric: type, session: Any) -> None:
    """A custom loop's epoch ends where it resets its metrics: the base class and every subclass that
    overrides ``reset_state`` (the deprecated ``reset_states`` calls it)."""
    todo, seen = [metric], set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
        for name in ("reset_state", "reset_states"):
            if name in vars(cls):
                setattr(cls, name, _wrap(vars(cls)[name], lambda orig, m, a, k: session.metric_reset(orig, m, a, k)))


