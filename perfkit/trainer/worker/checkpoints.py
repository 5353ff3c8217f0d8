"""Checkpoint saves, timed: the goodput ledger's checkpoint bucket (analysis/goodput.py).

A save is timed where TensorFlow and Keras make one: ``tf.train.CheckpointManager.save`` and
``tf.train.Checkpoint.write`` (what ``save`` and every manager write through), and Keras' ``ModelCheckpoint``
(and Keras 3's ``BackupAndRestore``) writing the model; tf_keras' ``BackupAndRestore`` backs up through a
manager. Calls nest (a
manager's save writes a checkpoint; BackupAndRestore saves through a manager), so only the outermost call of
a thread is counted. Each save's seconds go to the sink the worker's status registered (``set_sink``):
status.json's ``checkpoints`` (saves and seconds). Installed by the built-in trainer before its fit and by
the start-up hook once TensorFlow or Keras is imported; timing never breaks training.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_SINK: list[Callable[[float], None]] = []  # the recorded part's status of this process, the latest
_DEPTH = threading.local()


def set_sink(sink: Callable[[float], None]) -> None:
    """Where each save's seconds go from now on (one recorded part a process)."""
    _SINK[:] = [sink]


def timed(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (a method) timed as one checkpoint save, unless it runs inside another timed one."""
    if getattr(original, "_perfkit_checkpoint", False):
        return original

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_DEPTH, "n", 0)
        _DEPTH.n = depth + 1
        started = time.monotonic()
        try:
            return original(self, *args, **kwargs)
        finally:
            _DEPTH.n = depth
            if depth == 0:
                _report(time.monotonic() - started)

    wrapper._perfkit_checkpoint = True  # type: ignore[attr-defined]
    return wrapper


def _report(seconds: float) -> None:
    for sink in _SINK:
        try:
            sink(seconds)
        except Exception:  # noqa: BLE001 - profiling never breaks training
            log.exception("perfkit: could not record a checkpoint save")


def install_tf() -> None:
    """TensorFlow's own checkpoints (``tf.train``)."""
    try:
        from tensorflow.python.checkpoint import checkpoint, checkpoint_management
    except ImportError:  # another layout of TensorFlow: saves are left untimed, training goes on
        log.info("perfkit: tf.train checkpoints not found; their saves are not timed")
        return
    manager = checkpoint_management.CheckpointManager
    manager.save = timed(manager.save)
    ckpt = checkpoint.Checkpoint
    ckpt.write = timed(ckpt.write)


def install_keras(module: Any) -> None:
    """A Keras' (tf_keras or keras) checkpointing callbacks: the model written, the backup taken."""
    callbacks = getattr(module, "callbacks", None)
    # tf_keras' BackupAndRestore saves through a tf.train.CheckpointManager (timed by install_tf); Keras 3's
    # writes its own files in _save_model. Callbacks' per-batch hooks are not timed: most calls save nothing.
    for name, methods in (("ModelCheckpoint", ("_save_model",)), ("BackupAndRestore", ("_save_model", "_backup"))):
        cls = getattr(callbacks, name, None)
        for method in methods:
            if cls is not None and method in vars(cls):
                setattr(cls, method, timed(vars(cls)[method]))
