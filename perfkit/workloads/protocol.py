"""The workload contract (``Workload``: the members perfkit calls, docs/workloads.md), what run.json records
of a workload (``WorkloadInfo``), and helpers for writing one (``InMemoryWorkload``, ``array_dataset``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

BUILTIN = "botdetector"
REQUIRED = ("name", "version", "params", "samples", "build_model", "train_dataset", "eval_dataset")


@runtime_checkable
class Workload(Protocol):
    name: str
    version: str

    def params(self) -> dict[str, Any]: ...

    def samples(self) -> tuple[int, int]: ...

    def build_model(self) -> Any: ...

    def train_dataset(self, input_context: Any, global_batch: int) -> Any: ...

    def eval_dataset(self, input_context: Any, global_batch: int) -> Any: ...


@dataclass(frozen=True)
class WorkloadInfo:
    """What run.json records of a workload: how it was named, and its identity."""

    spec: str
    name: str
    version: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "name": self.name, "version": self.version, "params": dict(self.params)}


def info(spec: str, wl: Any) -> WorkloadInfo:
    return WorkloadInfo(spec=spec, name=str(wl.name), version=str(wl.version), params=dict(wl.params()))



def array_dataset(x: Any, y: Any, input_context: Any, global_batch: int, shuffle_seed: int | None = None) -> Any:
    """For workloads whose data fits in memory: this input pipeline's shard of ``(x, y)`` (numpy arrays),
    shuffled when ``shuffle_seed`` is given (a different order per pipeline), batched at the per-replica
    batch with whole batches only, prefetched: what ``train_dataset`` / ``eval_dataset`` must return."""
    from perfkit._tf import tf

    ctx = input_context
    ds = tf().data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    if shuffle_seed is not None:
        ds = ds.shuffle(max(1, len(x) // ctx.num_input_pipelines), seed=shuffle_seed + ctx.input_pipeline_id)
    return ds.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True).prefetch(2)


class InMemoryWorkload:
    """A base for workloads whose data is generated or loaded into memory per process: a subclass sets
    ``name``, ``version``, ``sizes`` (preset -> (train, eval) samples), optionally ``global_batch`` and
    ``shape`` (its size parameters), and implements ``build_model()`` and ``data(n, offset) -> (x, y)``
    (``offset`` 1 for training, 2 for evaluation). Sizes, identity and both datasets come from here."""

    name: str
    version: str
    sizes: ClassVar[dict[str, tuple[int, int]]]
    shape: ClassVar[dict[str, Any]] = {}

    def __init__(self, preset: str = "quick", seed: int = 0) -> None:
        if preset not in self.sizes:
            raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(self.sizes)}")
        self.preset, self.seed = preset, seed
        self.n_train, self.n_eval = self.sizes[preset]

    def params(self) -> dict[str, Any]:
        return {"train": self.n_train, "eval": self.n_eval, **self.shape, "seed": self.seed}

    def samples(self) -> tuple[int, int]:
        return self.n_train, self.n_eval

    def data(self, n: int, offset: int) -> tuple[Any, Any]:
        raise NotImplementedError

    def train_dataset(self, input_context: Any, global_batch: int) -> Any:
        return array_dataset(*self.data(self.n_train, 1), input_context, global_batch, shuffle_seed=self.seed)

    def eval_dataset(self, input_context: Any, global_batch: int) -> Any:
        return array_dataset(*self.data(self.n_eval, 2), input_context, global_batch)
