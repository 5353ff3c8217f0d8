"""A communication-heavy workload for perfkit: a wide MLP of ~4.7M parameters on generated tabular data.

Each step computes little per sample (two dense layers on a small per-worker batch) but all-reduces
~19 MB of gradients, so with several workers the exchange, not the compute, sets the pace.

    perfkit compare --workload examples/workloads/wide_mlp.py:workload --preset quick --workers 2
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfkit.workloads import InMemoryWorkload  # sizes, identity, datasets over in-memory arrays

SIZES = {"tiny": (1024, 256), "quick": (16384, 4096), "blog": (262144, 65536)}  # train, eval samples
FEATURES, WIDTH = 256, 2048


class WideMLP(InMemoryWorkload):
    name = "wide-mlp"
    version = "1"
    global_batch = 64  # small on purpose: little compute per step against the same gradient size
    sizes = SIZES
    shape = {"features": FEATURES, "width": WIDTH}

    def build_model(self) -> Any:
        import tensorflow as tf  # perfkit has chosen the Keras (tf-keras) before this runs

        k = tf.keras
        model = k.Sequential([
            k.layers.Input(shape=(FEATURES,)),
            k.layers.Dense(WIDTH, activation="relu"),
            k.layers.Dense(WIDTH, activation="relu"),
            k.layers.Dense(1, activation="sigmoid"),
        ], name="wide_mlp")
        model.compile(optimizer=k.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["accuracy"])
        return model

    def data(self, n: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        w = rng.standard_normal(FEATURES).astype(np.float32)  # the same hidden rule for train and eval
        x = np.random.default_rng(self.seed + offset).standard_normal((n, FEATURES)).astype(np.float32)
        y = ((x @ w + 0.5 * np.sin(3 * x[:, 0])) > 0).astype(np.float32).reshape(-1, 1)
        return x, y


workload = WideMLP  # perfkit calls it with preset= and seed=
