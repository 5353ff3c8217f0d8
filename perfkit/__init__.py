"""perfkit: how much faster is a multi-worker TensorFlow run than the single-machine baseline, and why not more."""

from __future__ import annotations

from perfkit import _started  # noqa: F401 - first: the time this process started using perfkit

__version__ = "0.1.0"


def record(global_batch: int | None = None, **options: object) -> object:
    """Record your own script's ``model.fit`` (``perfkit.trainer.worker.record``): ``with
    perfkit.record() as rec: model.fit(..., callbacks=rec.callbacks)``; the global batch is read from what
    ``fit`` is given unless ``global_batch=`` says it."""
    from perfkit.trainer.worker.record import record as _record

    return _record(global_batch, **options)  # type: ignore[arg-type]
