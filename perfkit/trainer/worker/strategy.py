"""Distribution strategies: MirroredStrategy (one machine), MultiWorkerMirroredStrategy and
ParameterServerStrategy (a cluster from TF_CONFIG)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfkit._tf import tf


@dataclass(frozen=True)
class StrategyInfo:
    name: str
    replicas: int
    devices: tuple[str, ...]


def split_cpu(n: int) -> int:
    """Split this process's CPU into ``n`` logical devices, if TensorFlow has not set its devices up yet;
    returns how many logical CPU devices the process has now. TensorFlow fixes them once it initialises:
    a sweep splits once, for its largest replica count, before its first run, and each run uses the
    first N (the baseline the first one)."""
    t = tf()
    cpu = t.config.list_physical_devices("CPU")[0]
    try:
        t.config.set_logical_device_configuration(cpu, [t.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError:  # already initialised (an earlier run in this process): what it has stays
        pass
    return len(t.config.list_logical_devices("CPU"))


def mirrored(replicas: int = 1) -> tuple[Any, StrategyInfo]:
    """MirroredStrategy over every local GPU, or the CPU where there is none (the article's set-up); with
    ``replicas`` N > 1, over N logical CPU devices of this process (``--mode single --replicas N``)."""
    from perfkit.errors import UsageError

    t = tf()
    if replicas > 1 and split_cpu(replicas) < replicas:
        have = len(t.config.list_logical_devices("CPU"))
        raise UsageError(f"--replicas {replicas}: TensorFlow already set this process up with {have} CPU "
                         f"device(s), and they cannot change once set; run it in a new process")
    cpus = [d.name for d in t.config.list_logical_devices("CPU")]
    if replicas > 1 or (len(cpus) > 1 and not t.config.list_logical_devices("GPU")):
        # Explicit devices: MirroredStrategy() alone would take every logical CPU a sweep split off
        strategy = t.distribute.MirroredStrategy(devices=cpus[:replicas])
    else:
        strategy = t.distribute.MirroredStrategy()  # today's behaviour, unchanged
    devices = tuple(strategy.extended.worker_devices)
    return strategy, StrategyInfo("MirroredStrategy", int(strategy.num_replicas_in_sync), devices)


def applied(strategy: Any) -> dict[str, Any]:
    """What TensorFlow reports it set up for ``strategy`` in this process (run.json): its cross-device ops
    (MirroredStrategy on CPU devices: CollectiveAllReduce, RING), the logical CPU devices, the thread pools."""
    t = tf()
    ops = getattr(strategy.extended, "_cross_device_ops", None)  # no public getter; None where it moved
    options = getattr(ops, "_options", None)
    impl = getattr(options, "implementation", None)
    return {"cross_device_ops": type(ops).__name__ if ops is not None else None,
            "implementation": getattr(impl, "name", None if impl is None else str(impl)),
            "logical_cpus": len(t.config.list_logical_devices("CPU")),
            # 0: TensorFlow's default (the machine's cores). Every CPU device of a process shares one intra-op
            # pool unless TF_OVERRIDE_GLOBAL_THREADPOOL is set (local_device.cc): replicas share the cores.
            "threads": {"intra_op": int(t.config.threading.get_intra_op_parallelism_threads()),
                        "inter_op": int(t.config.threading.get_inter_op_parallelism_threads()),
                        "intra_op_pool": "per device" if _env_true("TF_OVERRIDE_GLOBAL_THREADPOOL")
                        else "one, shared by every CPU device"}}


def _env_true(name: str) -> bool:
    import os

    return os.environ.get(name, "").strip().lower() in ("1", "true")


IMPLEMENTATIONS = {"ring": "RING", "auto": "AUTO", "nccl": "NCCL"}  # --all-reduce -> CommunicationImplementation


def multi_worker(bytes_per_pack: int = 0, all_reduce: str = "ring") -> tuple[Any, StrategyInfo]:
    """MultiWorkerMirroredStrategy from TF_CONFIG, with its collectives as ``--all-reduce`` and
    ``--bytes-per-pack`` say: ``CommunicationOptions(bytes_per_pack=N, implementation=RING | AUTO | NCCL)``.
    The default (ring, 0) is the CPU collective with TensorFlow's own packing (every gradient in one pack).

    The constructor blocks until every worker of the cluster has registered: callers run it under a
    watchdog (see trainer.worker.main).
    """
    t = tf()
    options = t.distribute.experimental.CommunicationOptions(
        bytes_per_pack=int(bytes_per_pack),
        implementation=getattr(t.distribute.experimental.CommunicationImplementation, IMPLEMENTATIONS[all_reduce]))
    strategy = t.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    devices = tuple(strategy.extended.worker_devices)
    return strategy, StrategyInfo("MultiWorkerMirroredStrategy", int(strategy.num_replicas_in_sync), devices)


# Variables smaller than this stay whole on one parameter server: sharding a few kB costs more RPCs than
# it spreads load (TF's own tutorial uses 256 KiB).
MIN_SHARD_BYTES = 256 << 10


def parameter_server(num_ps: int) -> tuple[Any, StrategyInfo]:
    """ParameterServerStrategy from TF_CONFIG, run by the chief; with several parameter servers, each
    variable is sharded over up to ``num_ps`` of them. Connecting waits for every server: callers run it
    under the launcher's connect timeout."""
    t = tf()
    resolver = t.distribute.cluster_resolver.TFConfigClusterResolver()
    partitioner = (t.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=MIN_SHARD_BYTES, max_shards=num_ps) if num_ps > 1 else None)
    strategy = t.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    return strategy, StrategyInfo("ParameterServerStrategy", int(strategy.num_replicas_in_sync),
                                  tuple(strategy.extended.worker_devices))
