"""Lazy TensorFlow import with the Keras 2 (tf-keras) switch set first.

Why tf-keras: Keras 3's ``fit`` under MultiWorkerMirroredStrategy fails (keras-team/keras#20585), while
tf-keras runs MWMS, class_weight, BackupAndRestore and the profiler, and emits per-step trace markers.
``TF_USE_LEGACY_KERAS`` is only read when TensorFlow is first imported, so it is set here, before that.
Nothing else in perfkit imports TensorFlow at module level, which keeps ``perfkit --help`` instant.
"""

from __future__ import annotations

import os
from types import ModuleType


def prepare_env() -> None:
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
