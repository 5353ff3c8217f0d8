"""``perfkit.record``: your own training script's ``model.fit`` recorded the way perfkit records its own.

    import perfkit
    with perfkit.record() as rec:
        model.fit(train, epochs=3, validation_data=val, callbacks=rec.callbacks)

Under ``perfkit launch`` a script needs none of this (the start-up hook adds the same callbacks, ``auto``);
with it, the script is recorded once. The global batch is read from what ``fit`` is given unless
``global_batch=`` says it. Under ``perfkit launch`` (``PERFKIT_RUN_DIR`` and ``PERFKIT_WORKER_INDEX`` set) it
records this worker's part of the launcher's run (``fitpart.WorkerPart``); the launcher samples CPU and
writes run.json. Run alone (``python train.py``) it is its own launcher for one process: it creates the run
directory, samples this process's CPU and marks the run complete, failed or interrupted on exit. A
``TF_CONFIG`` naming several workers is read, never changed; each task then writes its part
``<run-id>--w<i>`` of one run id (``run_id=`` or ``PERFKIT_RUN_ID``), merged by ``perfkit analyze``.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from perfkit.errors import UsageError
from perfkit.profiler.steps import StepLog
from perfkit.trainer.worker.fitpart import RUN_ID_VAR, Context, WorkerPart
from perfkit.trainer.worker.part import INDEX_VAR, RUN_DIR_VAR, command_identity, plan_config

log = logging.getLogger(__name__)

__all__ = ["RUN_ID_VAR", "Context", "Recorder", "WorkerPart", "record"]


def check_keras() -> None:
    """tf-keras is what perfkit records (Keras 3's fit fails under MultiWorkerMirroredStrategy,
    keras-team/keras#20585). Before TensorFlow is imported this process is switched to it; after, the
    Keras in use is checked and never changed."""
    if "tensorflow" not in sys.modules:
        from perfkit._tf import prepare_env

        prepare_env()
        return
    model_class = getattr(getattr(sys.modules["tensorflow"], "keras", None), "Model", None)
    module = str(getattr(model_class, "__module__", ""))
    keras = sys.modules.get(module.split(".")[0] or "keras")
    version = str(getattr(keras, "__version__", "unknown"))
    if module.startswith("tf_keras") or version.startswith("2."):  # tf-keras, or TensorFlow 2.15's own Keras 2
        return
    raise UsageError(f"perfkit.record: this process imported TensorFlow with Keras {version}, not tf-keras; "
                     f"perfkit records tf-keras models: set TF_USE_LEGACY_KERAS=1 before importing tensorflow "
                     f"(perfkit launch sets it) and pip install tf-keras")


class Recorder:
    """See the module docstring. ``callbacks`` go into ``model.fit``; use one recorder per fit."""

    def __init__(self, global_batch: int | None = None, results_dir: str | Path = "results", run_id: str | None = None,
                 label: str | None = None, profile_steps: str = "auto") -> None:
        from perfkit.profiler.tracewindow import check_spec
        from perfkit.trainer.worker.auto import install_fit_patch

        if global_batch is not None and (not isinstance(global_batch, int) or global_batch < 1):
            raise UsageError(f"perfkit.record: global_batch must be a positive int (the batch of one step over "
                             f"all workers) or left out (read from what fit is given), not {global_batch!r}")
        check_keras()
        install_fit_patch()
        run_dir, index = os.environ.get(RUN_DIR_VAR), os.environ.get(INDEX_VAR)
        if run_dir or index is not None:  # set by perfkit launch: both, and the index a worker's
            if not run_dir or index is None or not index.isdigit():
                raise UsageError(f"{RUN_DIR_VAR}={run_dir!r}, {INDEX_VAR}={index!r}: perfkit launch sets both, "
                                 f"the index a worker number; unset them to record a run of its own")
            self.context = Context.from_launcher(Path(run_dir), int(index))
        else:
            self.context = Context.alone(run_id, check_spec(profile_steps), label)
        if global_batch is not None and global_batch % self.context.num_workers:
            raise UsageError(f"perfkit.record: global_batch {global_batch} does not divide among "
                             f"{self.context.num_workers} workers")
        self.global_batch, self.results_dir = global_batch, Path(results_dir)
        self._part: Any = None
        self._own: Any = None

    @property
    def run_dir(self) -> Path:
        if self._part is None:
            raise UsageError("perfkit.record: use it as a context manager (with perfkit.record(...) as rec:)")
        return self._part.run_dir

    @property
    def callbacks(self) -> list[Any]:
        if self._part is None:
            raise UsageError("perfkit.record: rec.callbacks is ready inside 'with perfkit.record(...) as rec:'")
        return self._part.callbacks()

    def __enter__(self) -> Recorder:
        ctx = self.context
        if not ctx.launched:
            self._own = OwnRun.create(ctx, self.results_dir, self.global_batch)
            ctx = self._own.context
        per_worker = self.global_batch // ctx.num_workers if self.global_batch else 0
        self._part = WorkerPart(ctx, StepLog(samples_per_step=per_worker), self.global_batch)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        outcome = self._part.end(exc)
        if self._own is not None:
            self._own.finish(self._part, outcome)


def record(global_batch: int | None = None, results_dir: str | Path = "results", run_id: str | None = None,
           label: str | None = None, profile_steps: str = "auto") -> Recorder:
    """Record this process's ``model.fit``; ``global_batch``: samples per step over all workers (default: read
    from what ``fit`` is given)."""
    return Recorder(global_batch, results_dir, run_id, label, profile_steps)


class OwnRun:
    """A run that no launcher made (``python train.py`` with perfkit.record): this process writes run.json,
    samples its own CPU and records how it ended."""

    def __init__(self, run: Any, context: Any, sampler: Any, global_batch: int) -> None:
        self.run, self.context, self.sampler, self.global_batch = run, context, sampler, global_batch

    @classmethod
    def create(cls, ctx: Any, results_dir: Path, global_batch: int) -> OwnRun:
        from perfkit.profiler.sampler import Sampler, Target
        from perfkit.results import RunDir

        multi = ctx.num_workers > 1
        name = f"{ctx.run_id}--w{ctx.index}" if multi else ctx.run_id
        run = RunDir.create(results_dir, name, _meta(name, ctx, global_batch))
        sampler = Sampler(0.5, [Target(os.getpid(), ctx.index, "trainer", ctx.host)])
        sampler.start()
        return cls(run, replace(ctx, run_dir=run.path), sampler, global_batch)

    def finish(self, part: WorkerPart, outcome: tuple[str, str | None]) -> None:
        from perfkit.profiler.tracewindow import finish_traces

        sampled = self.sampler.stop()
        self.run.write_frame("cpu.parquet", sampled.cpu)
        self.run.write_frame("system.parquet", sampled.system)
        config = {**self.run.meta.config, **plan_config(part.plan)}
        record = part.worker_record()
        self.run.finish(outcome[0], outcome[1], sampler=sampled.stats, workers=[record], config=config)
        captured = {str(self.context.index): record.profile} if record.profile else {}
        finish_traces(self.run, self.context.profile_steps, captured)


def _meta(run_id: str, ctx: Any, global_batch: int) -> Any:
    from perfkit.machine import machine_info, versions
    from perfkit.runmeta import ClusterRecord, RunMeta

    multi = ctx.num_workers > 1
    workers = tuple({"index": i, "host": ctx.host if i == ctx.index else None, "endpoint": e}
                    for i, e in enumerate(ctx.endpoints)) or ({"index": 0, "host": ctx.host, "endpoint": None},)
    return RunMeta.new(
        run_id, mode="multi" if multi else "single",
        config={"mode": "multi" if multi else "single", "batch_size": global_batch, "epochs": None,
                "profile_steps": ctx.profile_steps, "sample_interval": 0.5, "workload": "command"},
        workload=command_identity(["python", *sys.argv]), recorder={"launched": False, "argv": list(sys.argv)},
        part={"name": f"w{ctx.index}", "workers": [ctx.index]} if multi else None,
        cluster=ClusterRecord(num_workers=ctx.num_workers, local_workers=(ctx.index,), workers=workers),
        versions=versions(), machine=machine_info())
