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

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from perfkit.errors import PerfkitError, UsageError

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


def normalise_spec(spec: str) -> str:
    """A file spec with an absolute path (workers may start elsewhere); a module spec as given."""
    target, attr = _split(spec)
    if target.endswith(".py"):
        return f"{Path(target).expanduser().resolve()}:{attr}"
    return spec


def load(spec: str, preset: str, seed: int) -> Any:
    """The workload SPEC names, checked to have every member; a one-line UsageError otherwise."""
    from perfkit._tf import prepare_env

    target, attr = _split(spec)
    prepare_env()  # a module that imports TensorFlow at its top gets the Keras perfkit trains with (tf-keras)
    module = _import_file(spec, Path(target)) if target.endswith(".py") else _import_module(spec, target)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"--workload {spec}: {target} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if inspect.isclass(obj) or (callable(obj) and _missing(obj)):
        obj = _call_factory(spec, obj, preset, seed)
    missing = _missing(obj)
    if missing:
        raise UsageError(f"--workload {spec}: {type(obj).__name__} object has no {', '.join(missing)} (a workload "
                         f"needs {', '.join(REQUIRED)}; see docs/workloads.md)")
    return obj


def _split(spec: str) -> tuple[str, str]:
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", attr):
        raise UsageError(f"--workload {spec}: expected module:attr or path/to/file.py:attr (e.g. "
                         f"examples/workloads/wide_mlp.py:workload), or {BUILTIN}")
    return target, attr


def _import_module(spec: str, name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise UsageError(f"--workload {spec}: no module named {exc.name!r}") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed while importing
        raise UsageError(f"--workload {spec}: importing {name} failed: {_line(exc)}") from None


_FILES: dict[Path, Any] = {}  # a file is executed once per process, as an imported module would be


def _import_file(spec: str, path: Path) -> Any:
    path = path.expanduser().resolve()
    if path in _FILES:
        return _FILES[path]
    if not path.is_file():
        raise UsageError(f"--workload {spec}: {path}: no such file")
    name = "perfkit_workload_" + re.sub(r"\W", "_", path.stem)
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise UsageError(f"--workload {spec}: {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module  # dataclasses and pickling-free introspection look modules up by name
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001
        sys.modules.pop(name, None)
        raise UsageError(f"--workload {spec}: importing {path} failed: {_line(exc)}") from None
    _FILES[path] = module
    return module


def _call_factory(spec: str, factory: Any, preset: str, seed: int) -> Any:
    try:
        return factory(preset=preset, seed=seed)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"--workload {spec}: {getattr(factory, '__name__', 'the factory')}(preset={preset!r}, "
                         f"seed={seed}) failed: {_line(exc)}") from None


def _missing(obj: Any) -> list[str]:
    return [m for m in REQUIRED if not hasattr(obj, m)]


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def config_overrides(spec: str | None, preset: str, seed: int | None, batch_size: int | None,
                     **builtin_only: Any) -> dict[str, Any]:
    """RunConfig fields for ``--workload SPEC``: the normalised spec, and the workload's own ``global_batch``
    (an optional member) where ``--batch-size`` is not given. The bot detector's data flags are refused
    with another workload."""
    if spec is None or spec == BUILTIN:
        return {"workload": BUILTIN}
    used = [k for k, v in builtin_only.items() if v is not None]
    if used:
        raise UsageError(f"--{used[0].replace('_', '-')}: only with the built-in {BUILTIN} workload, not "
                         f"--workload {spec}")
    spec = normalise_spec(spec)
    out: dict[str, Any] = {"workload": spec}
    if batch_size is None:
        from perfkit.config import get_preset

        wl = load(spec, preset, seed if seed is not None else get_preset(preset).seed)
        own = getattr(wl, "global_batch", None)
        if own is not None:
            if not isinstance(own, int) or own < 1:
                raise UsageError(f"--workload {spec}: global_batch must be a positive int, not {own!r}")
            out["batch_size"] = own
    return out


def resolve(cfg: Any) -> Any:
    """The workload a run config names: the built-in bot detector (built from the config's data options),
    or the user's."""
    if cfg.workload == BUILTIN:
        from perfkit.workloads.botdetector import BotDetector

        return BotDetector(cfg)
    return load(cfg.workload, cfg.preset, cfg.seed)


def prepare_workload(workload: Any, spec: str, cache_dir: Path, trains_here: bool) -> dict[str, Any]:
    """Run the workload's optional ``prepare`` and return what run.json records as its data. Where this
    process also trains (single mode), a workload's optional ``data_info()`` describes the loaded data."""
    prepare = getattr(workload, "prepare", None)
    out = dict(_guard(spec, "prepare(cache_dir)", lambda: prepare(Path(cache_dir))) or {}) if callable(prepare) else {}
    describe = getattr(workload, "data_info", None)
    if trains_here and callable(describe):
        out.update(describe())
    return out


def preflight(workload: Any, spec: str, global_batch: int, num_workers: int, replicas: int = 1) -> None:
    """A user's workload, tried before any run directory exists: its sample counts, a compiled model, and
    both datasets batched at worker 0's per-replica batch (``replicas``: replicas of one worker process,
    single mode's ``--replicas``). Each fault is a one-line UsageError."""
    if spec == BUILTIN:
        return
    from perfkit._tf import tf
    from perfkit.workloads.pipeline import check_batch

    n_train, n_eval = _guard(spec, "samples()", workload.samples)
    if min(int(n_train), int(n_eval)) < global_batch:
        raise UsageError(f"--workload {spec}: samples() gives {int(n_train)} training / {int(n_eval)} evaluation "
                         f"samples, fewer than one global batch of {global_batch}")
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
