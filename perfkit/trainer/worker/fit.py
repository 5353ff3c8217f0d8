"""One process's training: build the datasets and the model under a strategy and ``fit`` it.

Used as-is by single mode (one process) and by each worker of a multi-worker cluster.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.config import RunConfig
from perfkit.events import Observer
from perfkit.profiler import ondemand, scalars, tracewindow
from perfkit.profiler.steps import StepLog, keras_callback
from perfkit.profiler.tracewindow import CaptureTarget
from perfkit.runmeta import FitPlan
from perfkit.workloads import BUILTIN, compiled, pipeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Instruments:
    """What besides the step recorder watches this process's fit: a profiler window and epoch scalars."""

    capture: CaptureTarget | None = None  # None: no trace window (``--no-profile``)
    scalars_dir: Path | None = None
    on_capture: Callable[[dict[str, Any]], None] | None = None  # told each state of the capture, and its end
    # told the windows asked for while training (perfkit watch --trace-now); None: none are taken
    on_demand: Callable[[dict[str, Any]], None] | None = None


@contextlib.contextmanager
def worker_log(path: Path) -> Iterator[None]:
    """Copy perfkit's and TensorFlow's Python log records of this process into ``path``."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    ours, tf_logger = logging.getLogger("perfkit"), logging.getLogger("tensorflow")
    saved_level = ours.level
    # perfkit's own INFO records go only to this file (nothing prints them); TensorFlow's logger keeps
    # its level, since lowering it would also send its INFO lines to the terminal through its handler.
    ours.setLevel(logging.INFO)
    for lg in (ours, tf_logger):
        lg.addHandler(handler)
    try:
        yield
    finally:
        for lg in (ours, tf_logger):
            lg.removeHandler(handler)
        ours.setLevel(saved_level)
        handler.close()


def fit(cfg: RunConfig, workload: Any, strategy: Any, steplog: StepLog, observer: Observer,
        cpu: Callable[[], float | None], num_workers: int = 1, on_plan: Callable[[FitPlan], None] | None = None,
        backup_dir: Path | None = None, instruments: Instruments | None = None,
        after_fit: Callable[[Any], None] | None = None,
        on_model: Callable[[Any, FitPlan], list[Any]] | None = None) -> FitPlan:
    """Train ``workload`` for ``cfg.epochs`` epochs; every step and epoch lands in ``steplog`` as it happens.
    ``after_fit`` gets the trained model (a cluster's workers calibrate their all-reduce with it).
    ``on_model`` instruments the built model and returns callbacks that run before the step recorder's;
    given one, the recorder times epochs only (ParameterServerStrategy: the chief's steps run elsewhere)."""
    local_batch = cfg.batch_size // num_workers
    # Steps are counted on the global batch so every worker runs the same number (MWMS requires it).
    n_train, n_eval = workload.samples()
    steps = pipeline.steps_per_epoch(int(n_train), cfg.batch_size)
    val_steps = pipeline.steps_per_epoch(int(n_eval), cfg.batch_size, "validation")
    observer.phase("building the input pipeline and the model")
    # The built-in workload's pipeline takes --prefetch itself; a user's gets ds.prefetch(N) added after it.
    extra = cfg.knobs.prefetch if cfg.workload != BUILTIN and isinstance(cfg.knobs.prefetch, int) else None
    train = pipeline.creator(workload.train_dataset, cfg.batch_size, cfg.workload, "train_dataset", extra)
    val = pipeline.creator(workload.eval_dataset, cfg.batch_size, cfg.workload, "eval_dataset", extra)
    with strategy.scope():
        model = workload.build_model()
        knobs = cfg.knobs.for_mode(cfg.mode.value)  # what this strategy has (compare runs every mode alike)
        model = compiled.apply_knobs(model, knobs.steps_per_execution, knobs.metrics)
    per_call = compiled.steps_per_execution_of(model)
    plan = FitPlan(steps_per_epoch=steps, validation_steps=val_steps, local_batch=local_batch,
                   params=int(model.count_params()), steps_per_execution=per_call,
                   executions_per_epoch=tracewindow.executions_per_epoch(steps, per_call))
    log.info("model %s: %d parameters; %d steps/epoch of %d samples per process", model.name, plan.params,
             steps, local_batch)
    if per_call > 1 or knobs.changed():
        log.info("knobs: %s; %d batch(es) per execution, %d executions per epoch", knobs.describe() or "defaults",
                 per_call, plan.executions_per_epoch)
    if on_plan is not None:
        on_plan(plan)
    observer.training_started(cfg.epochs, steps, cpu)
    first = on_model(model, plan) if on_model is not None else []
    callbacks = [*first, keras_callback(steplog, on_step=observer.step, on_epoch=_epoch_hook(observer),
                                        batches=on_model is None)]
    capture = _add_instruments(callbacks, cfg, plan, instruments or Instruments())
    from perfkit._tf import keras
    from perfkit.trainer.worker import checkpoints

    checkpoints.install_tf()  # every save timed (a backup below, a workload's own): the ledger's checkpoint bucket
    checkpoints.install_keras(keras())
    if backup_dir is not None:
        # A restarted cluster resumes from the last completed epoch instead of starting over.
        callbacks.append(keras().callbacks.BackupAndRestore(str(backup_dir)))
    try:
        with pipeline.device_datasets_without_autotune():
            model.fit(train, epochs=cfg.epochs, steps_per_epoch=steps, validation_data=val,
                      validation_steps=val_steps, callbacks=callbacks, verbose=0)
        log.info("model.fit returned")  # the gap after the last epoch line is fit's own teardown
    finally:
        if capture is not None:
            capture.finish()  # a failed fit may leave the profiler running: stop what we started
    observer.training_finished()
    if after_fit is not None:
        after_fit(model)
    return plan


def _add_instruments(callbacks: list[Any], cfg: RunConfig, plan: FitPlan,
                     instruments: Instruments) -> ondemand.Captures | None:
    if instruments.scalars_dir is not None:
        callbacks.append(scalars.keras_callback(instruments.scalars_dir))
    # The window counts executions (batches when there is one per execution, as by default); auto sizes
    # itself in batches (tracewindow.resolve).
    window = tracewindow.resolve(cfg.profile_steps, plan.executions_per_epoch, cfg.epochs, plan.steps_per_execution)
    target = instruments.capture
    if target is None or (window is None and instruments.on_demand is None):
        return None
    # One process alone may try a failed capture again in a later epoch; the workers of a cluster must
    # trace the same steps, so there the launcher retries them all together (trainer.supervise.supervise).
    retries = cfg.profile_retries if cfg.mode.value == "single" else 0
    scheduled = None if window is None else tracewindow.tf_capture(
        window, target, instruments.on_capture, retries, plan.executions_per_epoch, cfg.epochs)
    asked = None if instruments.on_demand is None else ondemand.OnDemand(target, instruments.on_demand)
    capture = ondemand.Captures(scheduled, asked)
    callbacks.append(tracewindow.keras_callback(capture, plan.steps_per_epoch,
                                                steps_per_execution=plan.steps_per_execution))
    return capture


def _epoch_hook(observer: Observer) -> Callable[[int, Any], None]:
    def hook(epoch: int, row: Any) -> None:
        log.info("epoch %d: %s", epoch + 1,
                 " ".join(f"{k}={v:.4f}" for k, v in row.items() if isinstance(v, float)))
        observer.epoch(epoch, row)

    return hook
