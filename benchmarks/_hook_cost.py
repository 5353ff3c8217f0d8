"""The per-step cost of perfkit's step recorder on the training thread, timed in isolation (run by
``python -m benchmarks overhead`` as ``python -m benchmarks._hook_cost``; prints one ``BENCH_JSON`` line).

A steady epoch's wall time moves a few percent between rounds on a shared machine, so a 0.5% target cannot
be read from it; the recorder's own cost can be timed to the microsecond. Each round calls tf-keras'
``CallbackList`` batch hooks as ``fit`` does, once with no callback (tf-keras then skips the hooks) and once
with the recorder ``perfkit run`` adds, under ``--quiet`` and with the terminal progress display (rendered
into memory). The difference is what one step pays for being recorded, tf-keras' dispatch to the hooks
included. The progress display also redraws itself from a thread: one redraw is timed and multiplied by
its refresh rate, the share of one core it takes while a terminal shows it.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks._runs import JSON_MARK

STEPS = 2000  # per round: long enough for the clock, short enough for ~0.1 s a round


def _per_step_us(keras: Any, model: Any, callbacks: list[Any], logs: dict[str, Any], steps: int) -> float:
    hooks = keras.callbacks.CallbackList(callbacks, add_history=False, add_progbar=False, model=model,
                                         epochs=1, steps=steps, verbose=0)
    hooks.on_train_begin()
    hooks.on_epoch_begin(0)
    start = time.perf_counter_ns()
    for i in range(steps):
        hooks.on_train_batch_begin(i)
        hooks.on_train_batch_end(i, logs)
    elapsed = time.perf_counter_ns() - start
    hooks.on_epoch_end(0, {})
    hooks.on_train_end()
    return elapsed / steps / 1e3


def _recorder(on_step: Callable[..., None]) -> Any:
    from perfkit.profiler.steps import StepLog, keras_callback

    return keras_callback(StepLog(samples_per_step=1), on_step=on_step)


def measure(rounds: int, steps: int) -> dict[str, Any]:
    import logging

    from rich.console import Console

    from perfkit._tf import keras, tf
    from perfkit.cli._progress import ProgressObserver, WarningsOnly

    logging.getLogger("tensorflow").setLevel(logging.ERROR)  # tf-keras warns that hooks outlast empty steps
    k = keras()
    model = k.Sequential([k.layers.Dense(1, input_shape=(3,))])
    model.compile("sgd", "mse")
    logs = {"loss": tf().constant(0.5), "accuracy": tf().constant(0.8)}  # tensors, as fit passes them
    got: dict[str, list[float]] = {"none": [], "quiet": [], "progress": []}
    redraw_ms: list[float] = []
    for _ in range(rounds):  # interleaved, so a slow moment touches every arm alike
        got["none"].append(_per_step_us(k, model, [], logs, steps))
        got["quiet"].append(_per_step_us(k, model, [_recorder(WarningsOnly().step)], logs, steps))
        shown = ProgressObserver(Console(file=io.StringIO(), force_terminal=True, width=120))
        shown.training_started(1, steps, lambda: 93.0)
        try:
            got["progress"].append(_per_step_us(k, model, [_recorder(shown.step)], logs, steps))
            start = time.perf_counter_ns()
            shown.redraw()
            redraw_ms.append((time.perf_counter_ns() - start) / 1e6)
        finally:
            shown.close()
    refresh_hz = ProgressObserver(Console(file=io.StringIO())).refresh_per_second
    return {"rounds": rounds, "steps": steps, "us_per_step": got,
            "recorder_us_per_step": {arm: statistics.median(a - b for a, b in zip(got[arm], got["none"], strict=True))
                                     for arm in ("quiet", "progress")},
            "redraw_ms": statistics.median(redraw_ms), "refresh_hz": refresh_hz,
            "redraw_core_share": statistics.median(redraw_ms) / 1e3 * refresh_hz}


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks._hook_cost", description=__doc__)
    p.add_argument("--rounds", type=_positive, default=5)
    p.add_argument("--steps", type=_positive, default=STEPS)
    args = p.parse_args(argv)
    print(JSON_MARK + json.dumps(measure(args.rounds, args.steps)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
