"""CPU budgets for workers on this machine: pinning and thread caps, and emulated hosts' CPU quotas.

Emulating the article's 16-core + 4-core hosts on one small machine needs each host's workers held to
that host's share of the CPU by the OS itself: a cgroup CPU quota (v2 ``cpu.max`` or v1
``cpu.cfs_quota_us``) where this process may create cgroups, otherwise CPU affinity plus TF thread caps.
Groups live under ``perfkit/`` in the cpu hierarchy and are removed afterwards; empty ones left by a
crashed launcher are removed at the next start.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit.cluster import ClusterSpec

log = logging.getLogger(__name__)

PERIOD_US = 100_000
V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/cpu")


@dataclass(frozen=True)
class Placement:
    """How one local worker is held: its cores (affinity), TF thread cap, and its host's budget."""

    index: int
    host: str
    cores: list[int] | None
    threads: int | None
    host_budget: float | None


def available_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def plan(cluster: ClusterSpec, local: list[int], pin: bool, emulate: bool,
         cgroups: bool) -> tuple[list[Placement], dict[str, float]]:
    """Placements of the local workers and the (scaled) budget of every emulated host."""
    cores = available_cores()
    budgets = cluster.cpu_budgets(len(cores)) if emulate else {}
    workers = {w.index: w for w in cluster.workers}
    per_host = {h.name: h.workers for h in cluster.hosts}
    out = []
    for n, i in enumerate(local):
        host = workers[i].host
        if emulate:
            share = budgets[host] / per_host[host]
            threads = max(1, math.ceil(share)) if pin else None
            mine = None if cgroups else _host_cores(cluster, host, budgets, cores)
            out.append(Placement(i, host, mine, threads, budgets[host]))
        elif pin:
            per = max(1, len(cores) // len(local))
            mine = [cores[(n * per + k) % len(cores)] for k in range(per)]
            out.append(Placement(i, host, mine, per, None))
        else:
            out.append(Placement(i, host, None, None, None))
    return out, budgets


def _host_cores(cluster: ClusterSpec, host: str, budgets: dict[str, float], cores: list[int]) -> list[int]:
    """Without cgroups, a host's budget is rounded to whole cores (at least one), handed out in order."""
    start = 0
    for h in cluster.hosts:
        count = max(1, round(budgets[h.name]))
        if h.name == host:
            return [cores[(start + k) % len(cores)] for k in range(count)]
        start += count
    return cores


@dataclass
class CpuQuota:
    """Per-host cgroups with a CPU quota; ``mechanism`` says which one was used (or none)."""

    run_id: str
    mechanism: str = "none"
    groups: dict[str, Path] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)

    @classmethod
    def detect(cls, run_id: str) -> CpuQuota:
        quota = cls(run_id)
        if (V2_ROOT / "cgroup.controllers").is_file() and "cpu" in _read(V2_ROOT / "cgroup.subtree_control"):
            quota.mechanism = "cgroup-v2"
        elif (V1_ROOT / "cpu.cfs_quota_us").is_file() and os.access(V1_ROOT, os.W_OK):
            quota.mechanism = "cgroup-v1"
        if quota.mechanism != "none":
            quota._remove_stale()
        return quota

    @property
    def enabled(self) -> bool:
        return self.mechanism != "none"

    def _base(self) -> Path:
        return (V2_ROOT if self.mechanism == "cgroup-v2" else V1_ROOT) / "perfkit"

    def create(self, host: str, cores: float) -> None:
        group = self._base() / f"{self.run_id}-{host}"
        try:
            group.mkdir(parents=True, exist_ok=True)
            quota = max(1000, int(cores * PERIOD_US))
            if self.mechanism == "cgroup-v2":
                (group / "cpu.max").write_text(f"{quota} {PERIOD_US}\n")
            else:
                (group / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
                (group / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        except OSError as exc:
            log.warning("cgroup for %s not usable (%s); falling back to affinity and thread caps", host, exc)
            self.mechanism = "none"
            return
        self.groups[host], self.limits[host] = group, quota / PERIOD_US

    def add(self, host: str, pid: int) -> None:
        group = self.groups.get(host)
        if group is not None:
            (group / "cgroup.procs").write_text(f"{pid}\n")

    def cleanup(self) -> None:
        for group in self.groups.values():
            _rmdir(group)
        self.groups.clear()

    def _remove_stale(self) -> None:
        base = self._base()
        if base.is_dir():
            for group in base.iterdir():
                if group.is_dir() and not _read(group / "cgroup.procs").strip():
                    _rmdir(group)

    def to_dict(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "quota_cores": dict(self.limits),
                "groups": {h: str(g) for h, g in self.groups.items()}}


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError as exc:
        log.warning("could not remove cgroup %s: %s", path, exc)
