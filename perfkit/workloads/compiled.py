"""A workload's compiled model under the trainer's knobs (``--steps-per-execution``, ``--metrics``;
docs/tuning.md): any workload's ``build_model()`` returns a model it compiled itself, so the knobs are
applied by compiling it again with its own optimizer, loss and loss weights, and either its own metrics or
the minimal set, and ``steps_per_execution``. Called inside ``strategy.scope()``, before ``fit``.

tf-keras 2.21 keeps what ``compile`` was given in ``model._compile_config.config`` (optimizer, loss,
metrics, loss_weights, weighted_metrics, run_eagerly, steps_per_execution, jit_compile: the objects
themselves, not serialised); a model without it (compiled by an older tf-keras) is read from
``model.optimizer``, ``model.loss`` and ``model.compiled_metrics``.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def metric_name(metric: Any) -> str:
    """A metric as ``compile`` takes it (a name, a Metric, a function) -> its name."""
    if isinstance(metric, str):
        return metric
    return str(getattr(metric, "name", None) or getattr(metric, "__name__", None) or type(metric).__name__)


def is_accuracy(metric: Any) -> bool:
    name = metric_name(metric).lower()
    return name in ("acc", "accuracy") or name.endswith("_accuracy")


def minimal_metrics(metrics: Any) -> Any:
    """``metrics`` as ``compile`` took them (None, one, a list, or a dict per output) with only the
    accuracies kept: the loss is always computed, so "minimal" is the loss and accuracy."""
    if metrics is None:
        return None
    if isinstance(metrics, dict):
        return {k: minimal_metrics(v) for k, v in metrics.items()}
    items = list(metrics) if isinstance(metrics, (list, tuple)) else [metrics]
    return [m for m in items if is_accuracy(m)]


def compile_args(model: Any) -> dict[str, Any]:
    """What ``model`` was compiled with, as ``compile`` keyword arguments."""
    saved = getattr(getattr(model, "_compile_config", None), "config", None)
    if isinstance(saved, dict):
        args = dict(saved)
    else:
        metrics = getattr(model, "compiled_metrics", None)
        loss = getattr(model, "compiled_loss", None)
        args = {"loss": getattr(model, "loss", None),
                "metrics": getattr(metrics, "_user_metrics", None),
                "weighted_metrics": getattr(metrics, "_user_weighted_metrics", None),
                "loss_weights": getattr(loss, "_user_loss_weights", None)}
    args["optimizer"] = model.optimizer  # the instance already made (a name given to compile is made once)
    return args


def steps_per_execution_of(model: Any) -> int:
    """The model's batches per execution (tf-keras: a variable; Keras 3: an int); 1 when it has none."""
    value = getattr(model, "_steps_per_execution", None)
    if value is None:
        value = getattr(model, "steps_per_execution", None)
    try:
        value = value.numpy() if hasattr(value, "numpy") else value
        return max(1, int(value)) if value is not None else 1
    except (TypeError, ValueError):
        return 1


def apply_knobs(model: Any, steps_per_execution: int, metrics: str) -> Any:
    """Compile ``model`` again with ``steps_per_execution`` and the ``metrics`` set ("full": its own,
    "minimal": the loss and accuracy only). A default (1, "full") leaves that part as the workload compiled
    it. Call inside the strategy's scope: the metrics' variables are made there."""
    if steps_per_execution == 1 and metrics == "full":
        return model
    args = compile_args(model)
    if metrics == "minimal":
        before = [metric_name(m) for m in _flat(args.get("metrics")) + _flat(args.get("weighted_metrics"))]
        args["metrics"] = minimal_metrics(args.get("metrics"))
        args["weighted_metrics"] = minimal_metrics(args.get("weighted_metrics"))
        after = [metric_name(m) for m in _flat(args["metrics"]) + _flat(args["weighted_metrics"])]
        log.info("--metrics minimal: %s instead of %s", ", ".join(after) or "the loss only", ", ".join(before))
    if steps_per_execution != 1:  # the default keeps what the workload compiled with
        args["steps_per_execution"] = steps_per_execution
    model.compile(**args)
    return model


def _flat(metrics: Any) -> list[Any]:
    if metrics is None:
        return []
    if isinstance(metrics, dict):
        return [m for v in metrics.values() for m in _flat(v)]
    return list(metrics) if isinstance(metrics, (list, tuple)) else [metrics]
