"""After training, every worker of a cluster times the all-reduces a balanced cluster would pay per step.

The transfer term of a step measured during an unequal run is not what equal workers would see: the
last worker to arrive at the all-reduce does its share of the exchange inside its own (throttled) CPU
budget, so the what-if would carry the starved worker's slowness into the "equal" world. Once training
has ended, no worker computes and none is throttled: every worker runs the same short sequence of
all-reduces, with the model's gradient shapes and with one float (tf-keras reduces the loss and each metric
state as scalars after the gradients), and records the median time of each. The analysis combines them
with the traced number of collectives per step (docs/figures.md, "what-if").

The same calls time the replicas of one process (``--mode single --replicas N``: MirroredStrategy over N
logical CPU devices, whose ``all_reduce`` is its CollectiveAllReduce): single mode records the result where
a cluster's workers do (``workers[0].calibration``), so a sweep compares the ways' sync cost alike.

Never breaks a run: each collective has a timeout, and a failure is recorded, not raised.
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any

log = logging.getLogger(__name__)

WARMUP = 3
ITERATIONS = 15
TIMEOUT_S = 60.0


def allreduce_calibration(strategy: Any, model: Any) -> dict[str, Any]:
    """Median seconds of one all-reduce of the model's gradients and of one float, on every worker alike."""
    from perfkit._tf import tf

    t = tf()
    try:
        options = t.distribute.experimental.CommunicationOptions(timeout_seconds=TIMEOUT_S)
        shapes = [tuple(v.shape) for v in model.trainable_variables]
        grads = [t.ones(s) for s in shapes]
        one = [t.ones([1])]
        arms = {"gradients": (_reduce_fn(t, strategy, options), grads),
                "one_float": (_reduce_fn(t, strategy, options), one)}
        out: dict[str, Any] = {"iterations": ITERATIONS, "tensors": len(shapes),
                               "floats": int(sum(int(t.size(g)) for g in grads))}
        for name, (fn, inputs) in arms.items():  # the same calls in the same order on every worker
            for _ in range(WARMUP):
                fn(inputs)
            times = []
            for _ in range(ITERATIONS):
                t0 = time.perf_counter()
                fn(inputs)
                times.append(time.perf_counter() - t0)
            out[f"{name}_s"] = statistics.median(times)
        return out
    except Exception as exc:  # noqa: BLE001 - a measurement, never a reason for a run to fail
        log.warning("all-reduce calibration failed: %s", exc)
        return {"error": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"}


def _reduce_fn(t: Any, strategy: Any, options: Any) -> Any:
    def replica(tensors: list[Any]) -> Any:
        ctx = t.distribute.get_replica_context()
        # identity: the replica's device, as a gradient computed there would have (free on CPU)
        reduced = ctx.all_reduce(t.distribute.ReduceOp.SUM, [t.identity(x) for x in tensors], options=options)
        return t.add_n([t.reshape(r, [-1])[0] for r in reduced])

    @t.function
    def step(tensors: list[Any]) -> Any:
        return strategy.run(replica, args=(tensors,))

    return lambda tensors: strategy.experimental_local_results(step(tensors))[0].numpy()
