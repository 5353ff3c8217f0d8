"""The model's training FLOPs per sample (analytic), and this machine's dense-matmul FLOP/s (measured).

Forward FLOPs per sample, counting a multiply-add as 2 FLOPs and every element-wise op as 1:

- LSTM layer (input i, units u) per time step: the gate pre-activations ``x·W + h·U`` are
  ``2·4u·(i + u)`` FLOPs; then 17u element-wise ops: 4u to add the two products, 4u bias, 4u gate
  activations (3 sigmoid + 1 tanh), 3u for ``c = f·c + i·g``, 2u for ``h = o·tanh(c)``. Times T steps.
- Dense layer (in, out): ``2·in·out`` + ``out`` bias + ``out`` activation.

Training = 3 x forward: the backward pass costs about twice the forward (gradients with respect to the
activations and to the weights, one matmul each per forward matmul). The optimizer update (Adam, ~10
FLOPs per parameter per step, i.e. ~4k per sample at batch 1024) and the loss are left out (< 0.1%).
For perfkit's model (LSTM 240 -> LSTM 128 -> Dense 32 -> Dense 1, 7 x 18 input) this is ~6.16 MFLOP
forward, ~18.5 MFLOP per training sample.

    python -m benchmarks.flops --size 2048 --repeats 5    # prints one BENCH_JSON line
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from perfkit.workloads.botdetector.model import DENSE_UNITS, LSTM_UNITS

LSTM_ELEMENTWISE_PER_UNIT = 17
TRAIN_OVER_FORWARD = 3


def lstm_forward_flops(inputs: int, units: int, steps: int) -> int:
    return steps * (2 * 4 * units * (inputs + units) + LSTM_ELEMENTWISE_PER_UNIT * units)


def dense_forward_flops(inputs: int, units: int) -> int:
    return 2 * inputs * units + 2 * units


def forward_flops_per_sample(sequence_length: int, n_features: int) -> int:
    total, width = 0, n_features
    for units in LSTM_UNITS:
        total += lstm_forward_flops(width, units, sequence_length)
        width = units
    for units in (DENSE_UNITS, 1):
        total += dense_forward_flops(width, units)
        width = units
    return total


def train_flops_per_sample(sequence_length: int = 7, n_features: int = 18) -> int:
    return TRAIN_OVER_FORWARD * forward_flops_per_sample(sequence_length, n_features)


def measure_matmul(size: int, repeats: int) -> dict[str, Any]:
    """Best of ``repeats`` float32 ``size x size`` matmuls on the CPU with TensorFlow's default threads.

    The result's sum is fetched inside the timed region so nothing is left running when the clock
    stops; the reduction costs size^2 FLOPs against 2·size^3, under 0.1%.
    """
    from perfkit._tf import tf

    t = tf()
    with t.device("/CPU:0"):
        a = t.random.normal((size, size), dtype=t.float32, seed=1)
        b = t.random.normal((size, size), dtype=t.float32, seed=2)
        float(t.reduce_sum(t.linalg.matmul(a, b)))  # warm-up: thread pools, allocator
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            float(t.reduce_sum(t.linalg.matmul(a, b)))
            times.append(time.perf_counter() - start)
    flops = 2.0 * size**3
    return {"size": size, "repeats": repeats, "seconds": times, "best_s": min(times),
            "flop_per_s": flops / min(times), "median_flop_per_s": flops / sorted(times)[len(times) // 2]}


def main(argv: list[str] | None = None) -> int:
    from perfkit.trainer.worker.bare import emit

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    emit({"matmul": measure_matmul(args.size, args.repeats),
          "train_flops_per_sample": train_flops_per_sample(),
          "forward_flops_per_sample": forward_flops_per_sample(7, 18)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
