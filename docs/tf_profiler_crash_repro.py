"""TF 2.21's profiler crashing a MultiWorkerMirroredStrategy worker in stop(): a reproducer with no perfkit.

    python docs/tf_profiler_crash_repro.py --runs 20 --workers 4 --cycles 3

Each run starts ``--workers`` local workers (this file with ``--worker I``), pinned to the cores in turn,
that train a small stacked LSTM with four metrics under MultiWorkerMirroredStrategy for ``--cycles``
epochs, validating after each, and open and close one profiler window per epoch
(``tf.profiler.experimental.start/stop`` around 5 steps). A worker killed by a signal is a crash. It
prints one line per run and the total. See tf-profiler-crash.md beside this file for what it shows.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time


def worker(index: int, ports: list[int], cycles: int, logdir: str) -> None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    os.sched_setaffinity(0, {index % os.cpu_count()})
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": index}})
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(index)
    x = rng.standard_normal((32768, 7, 18)).astype("float32")
    y = (rng.random(32768) < 0.2).astype("float32")

    def dataset(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.repeat().batch(ctx.get_per_replica_batch_size(1024))

    with strategy.scope():
        model = keras.Sequential([keras.layers.LSTM(240, return_sequences=True, unroll=True, input_shape=(7, 18)),
                                  keras.layers.LSTM(128, unroll=True), keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(1, activation="sigmoid")])
        model.compile("adam", "binary_crossentropy", metrics=["accuracy", keras.metrics.AUC(),
                                                              keras.metrics.Precision(), keras.metrics.Recall()])

    class Windows(keras.callbacks.Callback):  # steps 2-6 of every epoch, right after the last validation
        def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
            self.epoch = epoch

        def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
            if batch == 2:
                tf.profiler.experimental.start(f"{logdir}/w{index}-{self.epoch}")
            elif batch == 7:
                tf.profiler.experimental.stop()

    data = keras.utils.experimental.DatasetCreator(dataset)
    model.fit(data, epochs=cycles, steps_per_epoch=12, validation_data=data, validation_steps=4,
              callbacks=[Windows()], verbose=0)
    os._exit(0)  # TF's exit handlers can wait on a peer that already left


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_run(workers: int, cycles: int, timeout: float) -> tuple[list[int | None], bool]:
    """Each worker's exit code (None: still running when the run was cut off) and whether it timed out."""
    ports = [free_port() for _ in range(workers)]
    with tempfile.TemporaryDirectory() as logdir:
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(i), "--ports", ",".join(map(str, ports)),
                                   "--cycles", str(cycles), "--logdir", logdir],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(workers)]
        end = time.monotonic() + timeout
        while time.monotonic() < end and any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):  # one died: its peers would wait for ever
                break
            time.sleep(0.2)
        codes = [p.poll() for p in procs]  # before this driver kills anything
        timed_out = time.monotonic() >= end and all(c is None for c in codes)
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        return codes, timed_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--workers", type=int, default=4, help="local workers (the batch of 1024 is split)")
    ap.add_argument("--cycles", type=int, default=3, help="epochs per run, one profiler window each")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds per run (a run takes about a minute)")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ports", default="", help=argparse.SUPPRESS)
    ap.add_argument("--logdir", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        worker(args.worker, [int(p) for p in args.ports.split(",")], args.cycles, args.logdir)
        return
    crashed = hung = 0
    for i in range(args.runs):
        codes, timed_out = one_run(args.workers, args.cycles, args.timeout)
        died = [c for c in codes if c is not None and c < 0]
        crashed += bool(died)
        hung += timed_out
        what = "  <- killed by a signal" if died else "  <- no progress: cut off" if timed_out else ""
        print(f"run {i + 1}: exit codes {codes}{what}", flush=True)
    print(f"{crashed} of {args.runs} runs of {args.workers} workers had a worker killed by a signal, {hung} hung "
          f"({args.cycles} windows per run)")

if __name__ == "__main__":
    main()
