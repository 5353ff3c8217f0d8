"""A compute-heavy workload for perfkit: a small CNN (~170k parameters) on generated 32x32x3 images.

Each sample costs ~25 MFLOP of convolutions per training step while the gradients are under 1 MB, so
the workers compute almost all the time and the all-reduce is a small part of a step.

    perfkit compare --workload examples/workloads/small_cnn.py:workload --preset quick --workers 2
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfkit.workloads import InMemoryWorkload  # sizes, identity, datasets over in-memory arrays

SIZES = {"tiny": (1024, 256), "quick": (32768, 8192), "blog": (131072, 32768)}  # train, eval images
CLASSES, SIDE = 10, 32


class SmallCNN(InMemoryWorkload):
    name = "small-cnn"
    version = "1"
    global_batch = 256
    sizes = SIZES
    shape = {"side": SIDE, "classes": CLASSES}

    def build_model(self) -> Any:
        import tensorflow as tf

        k = tf.keras
        model = k.Sequential([
            k.layers.Input(shape=(SIDE, SIDE, 3)),
            k.layers.Conv2D(32, 3, activation="relu"),
            k.layers.MaxPooling2D(),
            k.layers.Conv2D(64, 3, activation="relu"),
            k.layers.MaxPooling2D(),
            k.layers.Flatten(),
            k.layers.Dense(64, activation="relu"),
            k.layers.Dense(CLASSES, activation="softmax"),
        ], name="small_cnn")
        model.compile(optimizer=k.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        return model

    def data(self, n: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
        """Class k is a grating of frequency k + 1 at a random phase and angle, in noise (an easy task: the
        point is the convolutions' cost, not the accuracy)."""
        rng = np.random.default_rng(self.seed + offset)
        y = rng.integers(0, CLASSES, n)
        u = np.linspace(0, 2 * np.pi, SIDE, dtype=np.float32)
        angle, phase = rng.uniform(0, np.pi, n), rng.uniform(0, 2 * np.pi, n)
        coord = np.cos(angle)[:, None, None] * u[None, :, None] + np.sin(angle)[:, None, None] * u[None, None, :]
        grating = np.sin((y + 1)[:, None, None] * coord + phase[:, None, None]).astype(np.float32)
        x = grating[..., None] * np.array([1.0, 0.6, 0.3], np.float32) + rng.normal(0, 0.8, (n, SIDE, SIDE, 3))
        return x.astype(np.float32), y.astype(np.int32)


workload = SmallCNN  # perfkit calls it with preset= and seed=
