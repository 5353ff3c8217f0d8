"""CPU budgets for workers on this machine: where each worker runs, and what it was actually given.

Emulating the article's 16-core + 4-core hosts on one small machine needs each host's workers held to
that host's share of the CPU by the OS itself: a cgroup CPU quota (``perfkit.trainer.hosts.cgroups``) where one
can be made, otherwise CPU affinity rounded to whole cores plus TF thread caps. Which one is decided before
any worker is placed; after the workers start, what each process really got is read back
(``applied``) and that, not the request, is what run.json and the analysis use.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from perfkit.cluster import ClusterSpec

MATCH_TOLERANCE = 0.10  # an applied budget within 10% of the request counts as the request


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
    workers = {w.index: w for w in cluster.tasks}  # parameter servers and the chief share their host's budget
    per_host = {h.name: h.processes for h in cluster.hosts}
    out = []
    for n, i in enumerate(local):
        host = workers[i].host
        if emulate:
            share = budgets[host] / per_host[host]
            threads = max(1, math.ceil(share)) if pin else None
            mine = None if cgroups else _host_cores(cluster, host, budgets, cores)
            out.append(Placement(i, host, _ps_safe(cluster, mine), threads, budgets[host]))
        elif pin:
            per = max(1, len(cores) // len(local))
            mine = [cores[(n * per + k) % len(cores)] for k in range(per)]
            out.append(Placement(i, host, _ps_safe(cluster, mine), per, None))
        else:
            out.append(Placement(i, host, None, None, None))
    return out, budgets


def _ps_safe(cluster: ClusterSpec, cores: list[int] | None) -> list[int] | None:
    """No single-core affinity under ParameterServerStrategy: a TF server that may run on one core only
    hangs on the first step it is sent (TF 2.21, whatever its thread pool sizes; seen on this project's
    2-core machine). Its thread caps still hold; an emulated host's budget then needs a quota."""
    return None if cluster.is_ps and cores is not None and len(cores) < 2 else cores


def _host_cores(cluster: ClusterSpec, host: str, budgets: dict[str, float], cores: list[int]) -> list[int]:
    """Without cgroups, a host's budget is rounded to whole cores (at least one), handed out in order."""
    start = 0
    for h in cluster.hosts:
        count = max(1, round(budgets[h.name]))
        if h.name == host:
            return [cores[(start + k) % len(cores)] for k in range(count)]
        start += count
    return cores


def unenforceable(cluster: ClusterSpec, budgets: dict[str, float]) -> str | None:
    """Why whole-core affinity (the fallback without a quota) cannot give the hosts their budgets, or
    None when it can: every budget a whole number of cores (within 10%), no core shared by two hosts."""
    cores = available_cores()
    if cluster.is_ps and any(max(1, round(b)) < 2 for b in budgets.values()):
        return "ParameterServerStrategy's servers cannot be held to one core by affinity (they hang)"
    given = {h.name: _host_cores(cluster, h.name, budgets, cores) for h in cluster.hosts}
    seen: set[int] = set()
    shared = False
    for mine in given.values():
        shared = shared or bool(seen & set(mine))
        seen |= set(mine)
    off = any(abs(len(given[h]) - b) > MATCH_TOLERANCE * b for h, b in budgets.items())
    if not (shared or off):
        return None
    got = ", ".join(f"{h} {len(c)} core{'s' if len(c) != 1 else ''}" for h, c in given.items())
    want = ", ".join(f"{b:.2g}" for b in budgets.values())
    return (f"whole-core affinity on {len(cores)} cores would give {got}{' (shared)' if shared else ''} "
            f"for budgets of {want}")


def applied(placements: list[Placement], reads: dict[int, dict[str, Any]], budgets: dict[str, float],
            enforced: bool = True) -> dict[str, Any]:
    """What the workers really got (read back after they started), per worker and per host. A host's
    applied budget is its group's quota, capped by the cores its workers may run on (their affinity)."""
    hosts: dict[str, dict[str, Any]] = {}
    for p in placements:
        got = reads.get(p.index) or {}
        h = hosts.setdefault(p.host, {"quotas": set(), "cores": set(), "read": True})
        h["read"] = h["read"] and bool(got.get("alive"))
        if got.get("quota_cores") is not None:
            h["quotas"].add(float(got["quota_cores"]))
        h["cores"] |= set(got.get("affinity") or [])
    applied_cores: dict[str, float | None] = {}
    for name, h in hosts.items():
        if not h["read"] or not h["cores"]:
            applied_cores[name] = None
            continue
        quota = min(h["quotas"]) if h["quotas"] else math.inf
        applied_cores[name] = round(min(quota, float(len(h["cores"]))), 4)
    differs = sorted(n for n, c in applied_cores.items() if n in budgets and
                     (c is None or abs(c - budgets[n]) > MATCH_TOLERANCE * budgets[n]))
    return {"workers": [{"worker": p.index, "host": p.host, **(reads.get(p.index) or {})} for p in placements],
            "host_budgets_cores": applied_cores, "differs_from_request": differs,
            "enforced": enforced}
