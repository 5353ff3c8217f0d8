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


def mirrored() -> tuple[Any, StrategyInfo]:
    """MirroredStrategy over every local GPU, or the CPU where there is none (the article's set-up)."""
    t = tf()
    strategy = t.distribute.MirroredStrategy()
    devices = tuple(strategy.extended.worker_devices)
    return strategy, StrategyInfo("MirroredStrategy", int(strategy.num_replicas_in_sync), devices)


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
