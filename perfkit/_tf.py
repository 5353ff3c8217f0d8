"""Lazy TensorFlow import with the Keras 2 (tf-keras) switch set first.

Why tf-keras: Keras 3's ``fit`` under MultiWorkerMirroredStrategy fails (keras-team/keras#20585), while
tf-keras runs MWMS, class_weight, BackupAndRestore and the profiler, and emits per-step trace markers.
``TF_USE_LEGACY_KERAS`` is only read when TensorFlow is first imported, so it is set here, before that.
Nothing else in perfkit imports TensorFlow at module level, which keeps ``perfkit --help`` instant.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from types import ModuleType

from perfkit.errors import UsageError

# The TensorFlow versions perfkit is tested with (pyproject.toml says the same to pip): 2.15 is the last with
# Keras 2 inside TensorFlow, 2.16 the first with Keras 3 as tf.keras (tf-keras beside it).
SUPPORTED = ((2, 15), (2, 21))
LEGACY_SWITCH_FROM = (2, 16)  # TF_USE_LEGACY_KERAS means something from here on


def installed_version() -> tuple[int, int] | None:
    """This environment's TensorFlow as (major, minor), read from its metadata without importing it."""
    try:
        parts = metadata.version("tensorflow").split(".")
        return int(parts[0]), int(parts[1])
    except (metadata.PackageNotFoundError, ValueError, IndexError):
        return None


def check_supported() -> None:
    """One line, before anything starts, when this environment's TensorFlow is outside the tested range."""
    found = installed_version()
    if found is None:
        return  # no TensorFlow: the command that needs it says so itself
    lo, hi = SUPPORTED
    if not lo <= found <= hi:
        raise UsageError(f"TensorFlow {found[0]}.{found[1]} (in {sys.prefix}): perfkit supports "
                         f"{lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}; install one of those (pip install "
                         f"'tensorflow>={lo[0]}.{lo[1]},<{hi[0]}.{hi[1] + 1}')")


def legacy_switch() -> bool:
    """Whether this TensorFlow reads TF_USE_LEGACY_KERAS (2.16+, where tf.keras is otherwise Keras 3)."""
    found = installed_version()
    return found is None or found >= LEGACY_SWITCH_FROM


def prepare_env() -> None:
    if legacy_switch():
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    # TF's C++ INFO and WARNING lines (cuda stubs, CPU features, dataset optimisation notes) drown the
    # progress display; errors still show, and a user's own setting wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def tf() -> ModuleType:
    prepare_env()
    import tensorflow

    return tensorflow


def keras() -> ModuleType:
    prepare_env()
    import tf_keras

    return tf_keras
