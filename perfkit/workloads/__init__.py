"""Workloads: what a run trains. The article's bot detector is the built-in one; ``--workload SPEC`` names
any other object that has the same few members (docs/workloads.md):

- ``name``, ``version`` (str): its identity; with ``params()`` it decides which runs compare;
- ``params() -> dict``: the data and size parameters (JSON values) that make two runs comparable;
- ``samples() -> (train, eval)``: samples per epoch, which give the steps per epoch at the global batch;
- ``prepare(cache_dir) -> dict | None`` (optional): run once before any worker starts (generate or check
  data); what it returns is recorded as the run's data;
- ``build_model()``: a compiled tf.keras model, called inside ``strategy.scope()``;
- ``train_dataset(input_context, global_batch)`` / ``eval_dataset(...)``: a ``tf.data.Dataset`` of this
  input pipeline's shard, batched at ``input_context.get_per_replica_batch_size(global_batch)`` (the shape
  of ``tf.keras.utils.experimental.DatasetCreator``), so each worker builds only its own shard.

SPEC is ``module:attr`` or ``path/to/file.py:attr``; the module is imported only because the user named
it. When ``attr`` is a class or function rather than a workload, it is called with ``preset=`` and ``seed=``.
"""

from perfkit.workloads.loading import checked, config_overrides, load, normalise_spec, resolve
from perfkit.workloads.preflight import preflight, prepare_workload
from perfkit.workloads.protocol import (
    BUILTIN,
    REQUIRED,
    InMemoryWorkload,
    Workload,
    WorkloadInfo,
    array_dataset,
    info,
)

__all__ = ["BUILTIN", "REQUIRED", "InMemoryWorkload", "Workload", "WorkloadInfo", "array_dataset", "checked",
           "config_overrides", "info", "load", "normalise_spec", "preflight", "prepare_workload", "resolve"]
