"""Run a function right after a module is first imported, without importing it: how perfkit's start-up hook
reaches a script's ``tensorflow`` and Keras without the script or perfkit importing them early.

A ``sys.meta_path`` finder answers only for the names it watches, asks the other finders for the real spec
and wraps its loader, so the module loads exactly as it would have and the hook runs after its body. Written
here rather than taken from ``wrapt`` (its post-import hooks do the same) to keep the hook's start-up, which
every launched Python process pays, to the standard library.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

Hook = Callable[[ModuleType], None]


class _Loader(importlib.abc.Loader):
    """The real loader, then the hooks; every other attribute is the real loader's."""

    def __init__(self, real: Any, hooks: list[Hook]) -> None:
        self._real, self._hooks = real, hooks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._real.exec_module(module)
        run_hooks(module, self._hooks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def run_hooks(module: ModuleType, hooks: list[Hook]) -> None:
    for hook in hooks:
        try:
            hook(module)
        except Exception as exc:  # noqa: BLE001 - a failed hook costs the recording, never the import
            log.warning("perfkit: could not hook into %s: %s: %s", module.__name__, type(exc).__name__, exc)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.hooks: dict[str, list[Hook]] = {}
        self._busy = threading.local()

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None) -> Any:
        hooks = self.hooks.get(name)
        busy: set[str] = self._busy.__dict__.setdefault("names", set())
        if not hooks or name in busy:
            return None
        busy.add(name)
        try:
            spec = importlib.util.find_spec(name)  # the other finders' answer (this one steps aside)
        finally:
            busy.discard(name)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, hooks)
        return spec


_FINDER = _Finder()


def when_imported(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` once ``name`` has been imported: now, if it already is."""
    module = sys.modules.get(name)
    loading = getattr(getattr(module, "__spec__", None), "_initializing", False)
    if module is not None and not (loading and name in _FINDER.hooks):
        run_hooks(module, [hook])
        return
    # Not imported yet, or still being imported by a loader of ours (``keras`` imports ``tensorflow``, whose
    # hook asks for ``keras``): that loader runs the list it holds once the module's body is done.
    _FINDER.hooks.setdefault(name, []).append(hook)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
