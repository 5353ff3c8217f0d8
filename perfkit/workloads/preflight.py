"""A workload tried before any run directory exists: its data prepared once, then (a user's workload) its
sample counts, a compiled model and both datasets, each fault a one-line UsageError naming the call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfkit.errors import PerfkitError, UsageError
from perfkit.workloads.loading import _line
from perfkit.workloads.protocol import BUILTIN


def prepare_workload(workload: Any, spec: str, cache_dir: Path, trains_here: bool) -> dict[str, Any]:
    """Run the workload's optional ``prepare`` and return what run.json records as its data. Where this
    process also trains (single mode), a workload's optional ``data_info()`` describes the loaded data."""
    prepare = getattr(workload, "prepare", None)
    out = dict(_guard(spec, "prepare(cache_dir)", lambda: prepare(Path(cache_dir))) or {}) if callable(prepare) else {}
    describe = getattr(workload, "data_info", None)
    if trains_here and callable(describe):
        out.update(describe())
    return out


def preflight(workload: Any, cfg: Any, num_workers: int) -> None:
    """A workload tried before any run directory exists, once its data is prepared (a user's file may hold
    fewer rows than the preset): its sample counts against the run's global batch and trace window (every
    workload), then, for a user's workload, a compiled model and both datasets batched at worker 0's
    per-replica batch (``cfg.replicas``: replicas of one worker process, single mode's ``--replicas``). Each
    fault is a one-line UsageError."""
    spec, global_batch, replicas = cfg.workload, cfg.batch_size, cfg.replicas
    if spec == BUILTIN:
        cfg.check_batch(*map(int, workload.samples()))
        return
    from perfkit._tf import tf
    from perfkit.workloads.pipeline import check_batch

    n_train, n_eval = _guard(spec, "samples()", workload.samples)
    if min(int(n_train), int(n_eval)) < global_batch:
        raise UsageError(f"--workload {spec}: samples() gives {int(n_train)} training / {int(n_eval)} evaluation "
                         f"samples, fewer than one global batch of {global_batch}")
    cfg.check_batch(int(n_train), int(n_eval))
    model = _guard(spec, "build_model()", workload.build_model)
    if getattr(model, "optimizer", None) is None or not hasattr(model, "fit"):
        raise UsageError(f"--workload {spec}: build_model() must return a compiled tf.keras model "
                         f"(got {type(model).__name__}{' without compile()' if hasattr(model, 'fit') else ''})")
    ctx = tf().distribute.InputContext(num_input_pipelines=num_workers, input_pipeline_id=0,
                                       num_replicas_in_sync=num_workers * replicas)
    for what in ("train_dataset", "eval_dataset"):
        ds = _guard(spec, f"{what}(input_context, {global_batch})", lambda: getattr(workload, what)(ctx, global_batch))
        check_batch(ds, ctx.get_per_replica_batch_size(global_batch), spec, what)


def _guard(spec: str, what: str, call: Any) -> Any:
    try:
        return call()
    except PerfkitError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code failed: said in one line, naming it
        if spec == BUILTIN:
            raise
        raise UsageError(f"--workload {spec}: {what} failed: {_line(exc)}") from None
