"""Distribution strategies: the single-machine MirroredStrategy (and, later, multi-worker)."""

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


def multi_worker() -> tuple[Any, StrategyInfo]:
    """MultiWorkerMirroredStrategy from TF_CONFIG, with ring all-reduce (the CPU collective).

    The constructor blocks until every worker of the cluster has registered: callers run it under a
    watchdog (see worker_main).
    """
    t = tf()
    options = t.distribute.experimental.CommunicationOptions(
        implementation=t.distribute.experimental.CommunicationImplementation.RING)
    strategy = t.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    devices = tuple(strategy.extended.worker_devices)
    return strategy, StrategyInfo("MultiWorkerMirroredStrategy", int(strategy.num_replicas_in_sync), devices)
