"""TensorFlow 2.21: a ParameterServerStrategy server pinned to one core hangs on its first step.

    python docs/tf_ps_single_core_repro.py          # workers and ps pinned to one core each: hangs
    python docs/tf_ps_single_core_repro.py --free   # the same without affinity: trains 2 epochs

Starts two workers and one parameter server (each pinned to a single core with sched_setaffinity before
TensorFlow is imported), then runs tf-keras ``model.fit`` under ParameterServerStrategy in this process.
Pinned, the chief's closures never return (py-spy: every ``WorkerClosureProcessingLoop`` thread waits in
``execute_with_cancellation``), whatever intra/inter-op thread counts the servers are given; with two or
more cores each, or none set, it trains. perfkit therefore never gives a ps-mode process a single-core
affinity (perfkit/trainer/hosts/cpubudget.py: ``_ps_safe``). Exits 0 when training finished, 1 after 60 s.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def server(cluster: dict, role: str, index: int, pin: bool) -> None:
    if pin:
        os.sched_setaffinity(0, [index % os.cpu_count()])
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    tf.distribute.Server(resolver.cluster_spec(), job_name=role, task_index=index, protocol="grpc", start=True)
    while True:
        time.sleep(60)


def chief(cluster: dict) -> None:
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    strategy = tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())
    x = np.random.rand(4096, 7, 18).astype("float32")
    y = (np.random.rand(4096, 1) > 0.8).astype("float32")

    def make(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.repeat().batch(256)

    with strategy.scope():
        model = keras.Sequential([keras.layers.LSTM(64, input_shape=(7, 18)), keras.layers.Dense(1, "sigmoid")])
        model.compile("adam", "binary_crossentropy")
    model.fit(keras.utils.experimental.DatasetCreator(make), epochs=2, steps_per_epoch=16, verbose=2)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        server(json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5] == "pin")
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--chief":
        chief(json.loads(sys.argv[2]))
        return 0
    pin = "--free" not in sys.argv
    p = free_ports(4)
    cluster = {"worker": [f"127.0.0.1:{p[0]}", f"127.0.0.1:{p[1]}"], "ps": [f"127.0.0.1:{p[2]}"],
               "chief": [f"127.0.0.1:{p[3]}"]}
    procs = [subprocess.Popen([sys.executable, __file__, "--serve", json.dumps(cluster), role, str(i),
                               "pin" if pin else "free"]) for role, i in (("worker", 0), ("worker", 1), ("ps", 0))]
    try:
        child = subprocess.Popen([sys.executable, __file__, "--chief", json.dumps(cluster)])
        try:
            code = child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            print("hung: no epoch finished within 60 s", file=sys.stderr)
            return 1
        return code
    finally:
        for proc in procs:
            proc.kill()


if __name__ == "__main__":
    raise SystemExit(main())
