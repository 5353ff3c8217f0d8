"""Where a run's local workers live: their CPU budgets, their private network, and the janitor that
removes both however the run ends. Everything is decided and made before the run directory exists, so
a setup that cannot be honoured is a one-line error with nothing half-made.

- CPU: a cgroup quota per emulated host where one can be made (``cgroups``), otherwise whole-core affinity
  plus thread caps, and otherwise (``--allow-unenforced``) the budgets are recorded as not enforced.
- Network: every local run gets network namespaces (``netns``), so TF's 0.0.0.0 servers are unreachable
  from other machines; a real host of a multi-host cluster (``--host``/``--task-index``) does not, its
  workers must be reachable by the other hosts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from perfkit.cluster import ClusterSpec, check_ports_free
from perfkit.errors import UsageError
from perfkit.trainer.hosts import cpubudget
from perfkit.trainer.hosts.cgroups import CpuQuota, read_back
from perfkit.trainer.hosts.janitor import Janitor
from perfkit.trainer.hosts.netns import Sandbox

log = logging.getLogger(__name__)


@dataclass
class HostEnv:
    cluster: ClusterSpec  # as the workers see it: the addresses and ports of their network
    placements: list[cpubudget.Placement]
    budgets: dict[str, float]  # requested (scaled) budget per emulated host
    quota: CpuQuota
    sandbox: Sandbox
    janitor: Janitor
    unenforced: str | None = None  # why the budgets are not enforced (--allow-unenforced)
    reads: dict[int, dict[str, Any]] = field(default_factory=dict)  # per worker: what it really got
    emulate: bool = False
    pin: bool = True

    @classmethod
    def setup(cls, cluster: ClusterSpec, local: tuple[int, ...], part: str | None, emulate: bool, pin: bool,
              allow_unenforced: bool, group_id: str, defer_budgets: bool = False) -> HostEnv:
        """``defer_budgets``: cgroup quotas start lifted and ``limit`` writes each host's when one of its
        workers reports training (workers that report states: perfkit's own); else from their start."""
        janitor = Janitor()
        janitor.start()
        quota = CpuQuota(group_id)
        sandbox = Sandbox(reason="a host of a multi-host cluster: its workers must be reachable by the other "
                                 "hosts") if part else None
        try:
            budgets = cluster.cpu_budgets(len(cpubudget.available_cores())) if emulate else {}
            unenforced = None
            if emulate:
                quota = CpuQuota.detect(group_id, on_create=lambda g: janitor.register("cgroup", g))
                quota.deferred = defer_budgets
                unenforced = _decide(cluster, quota, budgets, allow_unenforced)
            if sandbox is None:
                sandbox = Sandbox.create(cluster, lambda ns: janitor.register("netns", ns))
            runtime = _runtime_cluster(cluster, sandbox, emulate)
            if sandbox.mechanism == "none":
                check_ports_free(tuple(runtime.tasks[i] for i in local))
            placements, _ = cpubudget.plan(runtime, list(local), pin, emulate, quota.enabled)
        except BaseException:
            quota.cleanup()
            if sandbox is not None:
                sandbox.close()
            janitor.close()
            raise
        return cls(runtime, placements, budgets, quota, sandbox, janitor, unenforced, emulate=emulate, pin=pin)

    def wrap(self, index: int) -> list[str]:
        return self.sandbox.wrap(self.cluster.tasks[index].host)

    def netns(self, index: int) -> str | None:
        """The network namespace file of worker ``index``'s host, or None when it shares this machine's."""
        return self.sandbox.path(self.cluster.tasks[index].host)

    def started(self, index: int, pid: int) -> None:
        """Put a new worker into its host's group (before it computes anything), and tell the janitor, which
        stops it if the launcher dies (``janitor.finish_run``)."""
        self.janitor.register("worker", pid, index=index, started=_start_time(pid))
        host = self.cluster.tasks[index].host
        try:
            self.quota.add(host, pid)
        except OSError as exc:
            log.warning("could not put worker %d into its cgroup: %s", index, exc)

    def hold(self) -> None:
        """Before an attempt's workers start: deferred quotas lifted (``CpuQuota.hold``)."""
        try:
            self.quota.hold()
        except OSError as exc:
            log.warning("could not lift the emulated hosts' CPU quotas before the workers start: %s", exc)

    def limit(self, index: int) -> None:
        """Worker ``index`` trains: its host's deferred quota applies from now on."""
        host = self.cluster.tasks[index].host
        try:
            if self.quota.limit(host):
                log.info("host %s: CPU quota %.3g cores from now (worker %d training)", host,
                         self.quota.limits[host], index)
        except OSError as exc:
            log.warning("could not apply host %s's CPU quota: %s", host, exc)

    def read_back(self, index: int, pid: int) -> None:
        """What worker ``index`` really got, once it applied its own limits (it reports 'training')."""
        self.reads[index] = read_back(pid, self.quota.fs)

    def close(self) -> list[str]:
        left = self.quota.cleanup() + self.sandbox.close()
        self.janitor.close()
        return left

    def budget_meta(self) -> dict[str, Any]:
        emulate, pin = self.emulate, self.pin
        if emulate:
            mechanism = self.quota.mechanism if self.quota.enabled else \
                "affinity+thread-caps" if not self.unenforced else "unenforced"
        else:
            mechanism = "affinity+thread-caps" if pin else "none"
        out = {"mechanism": mechanism, "emulated": emulate, "pinned": pin, "host_budgets_cores": self.budgets,
               "quota": self.quota.to_dict() if emulate else None, "enforced": not self.unenforced,
               "unenforced_because": self.unenforced,
               "available_cores": len(cpubudget.available_cores()),
               "placements": [{"worker": p.index, "host": p.host, "cores": p.cores, "threads": p.threads}
                              for p in self.placements]}
        if self.reads:
            out["applied"] = cpubudget.applied(self.placements, self.reads, self.budgets, not self.unenforced)
        return out


def _start_time(pid: int) -> float | None:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def preflight(opts: Any) -> None:
    """Make and remove a run's hosts (MultiOptions ``opts``) without starting anyone: a UsageError now
    for what would refuse the run later (unenforceable budgets, a link this kernel cannot shape)."""
    env = HostEnv.setup(opts.cluster, opts.local_workers, opts.part, opts.emulate, opts.pin, opts.allow_unenforced,
                        "preflight")
    env.close()


def _decide(cluster: ClusterSpec, quota: CpuQuota, budgets: dict[str, float], allow: bool) -> str | None:
    """Make the quota groups, or check the whole-core fallback gives the budgets; None when enforced."""
    if quota.enabled:
        quota.prepare(budgets)
    if quota.enabled:
        return None
    why = cpubudget.unenforceable(cluster, budgets)
    if why is None:
        return None
    tried = "; ".join(quota.tried + [why])
    if not allow:
        raise UsageError(f"{cluster.source or 'cluster'}: the emulated hosts' CPU budgets cannot be enforced here "
                         f"({tried}); run as root where cgroups can be made, or pass --allow-unenforced to run "
                         f"with the budgets marked as not enforced")
    return tried


def _runtime_cluster(cluster: ClusterSpec, sandbox: Sandbox, emulate: bool) -> ClusterSpec:
    """Emulated hosts in their own namespaces keep their declared ports at their network's addresses;
    without namespaces they share this machine's ports, so they get free ones."""
    if sandbox.addresses:
        return cluster.with_addresses(sandbox.addresses)
    if emulate and sandbox.mechanism == "none":
        return cluster.with_free_ports()
    return replace(cluster)
