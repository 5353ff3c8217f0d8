"""``perfkit.record``: your own training script's ``model.fit`` recorded the way perfkit records its own.

    import perfkit
    with perfkit.record(global_batch=256) as rec:
        model.fit(train, epochs=3, validation_data=val, callbacks=rec.callbacks)

Under ``perfkit launch`` (``PERFKIT_RUN_DIR`` and ``PERFKIT_WORKER_INDEX`` set) it records this worker's
part of the launcher's run: steps and epochs (``workers/<i>/``, saved after every epoch), the trace window,
TensorBoard scalars and ``status.json``, from which the launcher follows its progress; the launcher samples
CPU and writes run.json. Run alone (``python train.py``) it is its own launcher for one process: it creates
the run directory, samples this process's CPU and marks the run complete, failed or interrupted on exit.
A ``TF_CONFIG`` naming several workers is read, never changed; each task then writes its part
``<run-id>--w<i>`` of one run id (``run_id=`` or ``PERFKIT_RUN_ID``), merged by ``perfkit analyze``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from perfkit.errors import UsageError
from perfkit.profiler.steps import StepLog
from perfkit.trainer.command import INDEX_VAR, RUN_DIR_VAR

RUN_ID_VAR = "PERFKIT_RUN_ID"


@dataclass(frozen=True)
class Context:
    """Where this process's records go and how it is to be traced."""

    run_dir: Path | None  # None until a run alone creates its own
    index: int
    num_workers: int
    host: str
    run_id: str
    profile_steps: str = "auto"
    profile_retries: int = 3
    attempt: int = 0
    launched: bool = False
    endpoints: tuple[str, ...] = ()  # every worker's host:port, from TF_CONFIG (a run alone, several tasks)

    @classmethod
    def from_launcher(cls, run_dir: Path, index: int) -> Context:
        launch_file = run_dir / "launch.json"
        try:
            launch = json.loads(launch_file.read_text(encoding="utf-8"))
            me = launch["workers"][str(index)]
        except (OSError, ValueError, KeyError) as exc:
            raise UsageError(f"{RUN_DIR_VAR}/{INDEX_VAR}: {launch_file} has no worker {index} "
                             f"({type(exc).__name__}); were they set by perfkit launch?") from None
        cfg = launch.get("config") or {}
        return cls(run_dir, index, len(launch["cluster"]["workers"]), me["host"],
                   str(launch["run_id"]), str(cfg.get("profile_steps", "auto")), int(cfg.get("profile_retries", 3)),
                   int(launch.get("attempt", 0)), launched=True)

    @classmethod
    def alone(cls, run_id: str | None, profile_steps: str, label: str | None) -> Context:
        from perfkit.config import sanitize_id
        from perfkit.machine import hostname
        from perfkit.results import new_run_id
        from perfkit.schedulers import from_tf_config

        text = os.environ.get("TF_CONFIG")
        task = from_tf_config(text, 0.0) if text else None
        if task is None or task.cluster.num_workers <= 1:
            rid = sanitize_id(run_id) if run_id else new_run_id("single", label)
            return cls(None, 0, 1, hostname(), rid, profile_steps)
        n = task.cluster.num_workers
        rid = run_id or os.environ.get(RUN_ID_VAR)
        if not rid:
            raise UsageError(f"TF_CONFIG names {n} workers: give every task the same run id (perfkit.record("
                             f"run_id=...) or {RUN_ID_VAR}), so that their parts form one run")
        return cls(None, task.index, n, hostname(), sanitize_id(rid), profile_steps,
                   endpoints=tuple(w.endpoint for w in task.cluster.workers))


def check_keras() -> None:
    """tf-keras is what perfkit records (Keras 3's fit fails under MultiWorkerMirroredStrategy,
    keras-team/keras#20585). Before TensorFlow is imported this process is switched to it; after, the
    Keras in use is checked and never changed."""
    if "tensorflow" not in sys.modules:
        from perfkit._tf import prepare_env

        prepare_env()
        return
    model_class = getattr(getattr(sys.modules["tensorflow"], "keras", None), "Model", None)
    if str(getattr(model_class, "__module__", "")).startswith("tf_keras"):
        return
    keras = sys.modules.get("keras")
    version = getattr(keras, "__version__", "unknown")
    raise UsageError(f"perfkit.record: this process imported TensorFlow with Keras {version}, not tf-keras; "
                     f"perfkit records tf-keras models: set TF_USE_LEGACY_KERAS=1 before importing tensorflow "
                     f"(perfkit launch sets it) and pip install tf-keras")


class Recorder:
    """See the module docstring. ``callbacks`` go into ``model.fit``; use one recorder per fit."""

    def __init__(self, global_batch: int, results_dir: str | Path = "results", run_id: str | None = None,
                 label: str | None = None, profile_steps: str = "auto") -> None:
        from perfkit.profiler.trace import check_spec

        if not isinstance(global_batch, int) or global_batch < 1:
            raise UsageError(f"perfkit.record: global_batch must be a positive int (the batch of one step over "
                             f"all workers), not {global_batch!r}")
        check_keras()
        run_dir, index = os.environ.get(RUN_DIR_VAR), os.environ.get(INDEX_VAR)
        if run_dir or index is not None:  # set by perfkit launch: both, and the index a worker's
            if not run_dir or index is None or not index.isdigit():
                raise UsageError(f"{RUN_DIR_VAR}={run_dir!r}, {INDEX_VAR}={index!r}: perfkit launch sets both, "
                                 f"the index a worker number; unset them to record a run of its own")
            self.context = Context.from_launcher(Path(run_dir), int(index))
        else:
            self.context = Context.alone(run_id, check_spec(profile_steps), label)
        if global_batch % self.context.num_workers:
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
        from perfkit.profiler.recording import OwnRun, WorkerPart

        ctx = self.context
        if not ctx.launched:
            self._own = OwnRun.create(ctx, self.results_dir, self.global_batch)
            ctx = self._own.context
        self._part = WorkerPart(ctx, StepLog(samples_per_step=self.global_batch // ctx.num_workers),
                                self.global_batch)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        outcome = self._part.end(exc)
        if self._own is not None:
            self._own.finish(self._part, outcome)


def record(global_batch: int, results_dir: str | Path = "results", run_id: str | None = None,
           label: str | None = None, profile_steps: str = "auto") -> Recorder:
    """Record this process's ``model.fit``; ``global_batch``: samples per step over all workers."""
    return Recorder(global_batch, results_dir, run_id, label, profile_steps)
