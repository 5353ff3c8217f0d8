"""Finding the workload a run names: the built-in bot detector, or a user's ``module:attr`` /
``file.py:attr``, imported only because the user named it, checked to have every member of the contract;
and the run config's fields that ``--workload`` decides."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import Any

from perfkit.errors import UsageError
from perfkit.workloads.protocol import BUILTIN, REQUIRED


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
                     **bot_flags: Any) -> dict[str, Any]:
    """RunConfig fields for ``--workload SPEC``: the normalised spec; the built-in bot detector's parameters
    from its own flags (``bot_flags``: ``train_players``, ``test_players``, ``sequence_length``, ``class_weight``
    as '0:W0,1:W1', ``data``; None: the preset's), checked by it; a user's workload's own ``global_batch`` (an
    optional member) where ``--batch-size`` is not given. The bot detector's flags are refused with another
    workload."""
    if spec is None or spec == BUILTIN:
        from perfkit.workloads.botdetector.params import BotParams, parse_class_weight

        given = dict(bot_flags)
        data, weights = given.pop("data", None), given.pop("class_weight", None)
        params = BotParams.for_preset(preset, **given, data_path=str(data) if data is not None else None,
                                      class_weight=parse_class_weight(weights) if weights is not None else None)
        return {"workload": BUILTIN, "params": params.to_dict()}
    used = [k for k, v in bot_flags.items() if v is not None]
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


def checked(cfg: Any) -> Any:
    """``cfg``, its workload's parameters checked against it now, before anything runs: the bot detector's
    sizes against the batch and trace window, and written out whole (the preset's for any not given), so that
    run.json records what was applied. A user's workload is tried by ``preflight`` before its run."""
    if cfg.workload == BUILTIN:
        from dataclasses import replace

        from perfkit.workloads.botdetector.params import BotParams

        params = BotParams.of(cfg)
        params.check_run(cfg)
        return replace(cfg, params=params.to_dict())
    return cfg


def resolve(cfg: Any) -> Any:
    """The workload a run config names: the built-in bot detector (built from the config's data options),
    or the user's."""
    if cfg.workload == BUILTIN:
        from perfkit.workloads.botdetector import BotDetector

        return BotDetector(cfg)
    return load(cfg.workload, cfg.preset, cfg.seed)
