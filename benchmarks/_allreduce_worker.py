"""One worker of ``bench allreduce``: ``python -m benchmarks._allreduce_worker --worker I ...``.

Pinned to one core with TensorFlow's pools capped as perfkit pins a one-core worker, joined in a
MultiWorkerMirroredStrategy with ring all-reduce on 127.0.0.1, it times ``get_replica_context().all_reduce``
inside ``strategy.run`` (the path Keras' optimizer takes for MWMS gradients) call by call and prints one
JSON line. Kept apart from bench/allreduce.py so that the parent never holds TensorFlow code: this module
imports TensorFlow only inside its functions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

from benchmarks._runs import JSON_MARK

N_FEATURES = 18  # the synthetic dataset's behaviour features per day
ARMS = ("gradients", "one pack", "one float", "step")


def _join(index: int, ports: list[int], parent: int) -> tuple[Any, dict[str, Any]]:
    """Pin, cap the pools and join: all before TensorFlow's context starts, which fixes both for good."""
    from perfkit.trainer.worker.guard import apply_cpu_limits, die_with_launcher

    die_with_launcher(parent)  # the kernel kills this worker if the benchmark dies, even by kill -9
    cores = sorted(os.sched_getaffinity(0))
    core = cores[index % len(cores)]
    apply_cpu_limits(1, [core])
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": index}})
    from perfkit._tf import tf
    from perfkit.trainer.worker.strategy import multi_worker

    t = tf()
    strategy, _ = multi_worker()
    pools = {"intra_op": t.config.threading.get_intra_op_parallelism_threads(),
             "inter_op": t.config.threading.get_inter_op_parallelism_threads()}
    return strategy, {"core": core, "threads": pools, "replicas": int(strategy.num_replicas_in_sync)}


def _step(strategy: Any, small: int = 0) -> Any:
    """One call = one all-reduce of ``tensors``, then ``small`` scalar all-reduces one after another (the
    ``step`` arm: a training step's collectives). Returns the sum of each reduced tensor's first element
    (plus the last scalar's result), so .numpy() waits for every output (ones everywhere: the answer is
    workers x tensors, + workers when there are scalars)."""
    from perfkit._tf import tf

    t = tf()

    def replica(tensors: list[Any]) -> Any:
        ctx = t.distribute.get_replica_context()
        # A function argument has no device, and all_reduce reduces "to the inputs' devices": an identity
        # made here takes the replica's device (free on CPU: no copy), as a gradient computed here would.
        tensors = [t.identity(x) for x in tensors]
        reduced = ctx.all_reduce(t.distribute.ReduceOp.SUM, tensors)
        value = t.add_n([t.reshape(r, [-1])[0] for r in reduced])
        last = value
        for _ in range(small):
            # tf-keras reduces the loss and each metric state in turn after the gradients; feeding each
            # scalar from the previous result serializes them the same way. sign() of the positive sum
            # is exactly 1, so every scalar all-reduce returns the number of workers.
            last = ctx.all_reduce(t.distribute.ReduceOp.SUM, t.sign(last))
        return value + last if small else value

    @t.function
    def step(tensors: list[Any]) -> Any:
        return strategy.run(replica, args=(tensors,))

    return lambda tensors: strategy.experimental_local_results(step(tensors))[0]


def _time_arms(steps: dict[str, Any], inputs: dict[str, list[Any]], rounds: int, warmup: int,
               iterations: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Seconds per call of each arm, and each arm's last answer. Every worker runs the same calls in the
    same order: a collective only completes when all of them have entered it."""
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    check: dict[str, float] = {}
    for _ in range(rounds):  # arms interleaved by round: slow drift of the machine hits all alike
        for arm in ARMS:
            for _ in range(warmup):
                steps[arm](inputs[arm]).numpy()
            for _ in range(iterations):
                t0 = time.perf_counter()
                value = steps[arm](inputs[arm]).numpy()
                times[arm].append(time.perf_counter() - t0)
            check[arm] = float(value)
    return times, check


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks._allreduce_worker --worker I")
    for opt in ("--worker", "--iterations", "--warmup", "--rounds", "--sequence-length", "--small", "--parent"):
        p.add_argument(opt, type=int, required=True)
    p.add_argument("--ports", required=True)
    return p.parse_args(argv)


def worker_main(argv: list[str]) -> int:
    a = _parse(argv)
    ports = [int(x) for x in a.ports.split(",")]
    strategy, info = _join(a.worker, ports, a.parent)
    from perfkit._tf import tf
    from perfkit.workloads.botdetector.model import build_model

    t = tf()
    shapes = [tuple(v.shape) for v in build_model(a.sequence_length, N_FEATURES).trainable_variables]
    floats = sum(math.prod(s) for s in shapes)
    grads = [t.ones(s) for s in shapes]
    inputs = {"gradients": grads, "one pack": [t.ones([floats])], "one float": [t.ones([1])], "step": grads}
    # one traced function per arm, built in the same order everywhere
    steps = {arm: _step(strategy, a.small if arm == "step" else 0) for arm in ARMS}
    times, check = _time_arms(steps, inputs, a.rounds, a.warmup, a.iterations)
    extra = {arm: a.small if arm == "step" else 0 for arm in ARMS}  # the scalars, beyond the inputs
    want = {arm: float(len(ports) * (len(inputs[arm]) + (extra[arm] > 0))) for arm in ARMS}
    print(JSON_MARK + json.dumps({
        "worker": a.worker, **info, "shapes": [list(s) for s in shapes], "small": a.small,
        "tensors": {arm: len(inputs[arm]) + extra[arm] for arm in ARMS},
        "floats": {arm: int(sum(math.prod(x.shape) for x in inputs[arm])) + extra[arm] for arm in ARMS},
        "check": check, "correct": check == want, "arms": times}), flush=True)
    return 0


if __name__ == "__main__":
    import logging

    logging.getLogger("tensorflow").setLevel(logging.WARNING)  # an INFO line per traced all-reduce
    raise SystemExit(worker_main(sys.argv[1:]))
