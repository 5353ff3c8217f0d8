"""The three ways to scale side by side (``perfkit sweep --ways``): what each run's processes hold and what
its replicas pay to synchronise, per run of a sweep (docs/scaling.md).

- replicas: one process (``--mode single --replicas N``), MirroredStrategy over N logical CPU devices;
- workers: N MultiWorkerMirrored worker processes, one replica each;
- ps: N ParameterServerStrategy workers (one replica each), one parameter server and the chief.

Memory per replica: the peak RSS of the processes that hold replicas or their variables, summed, over the
replicas (the single process for replicas and the baseline; each worker; ps: the workers and the parameter
server; the chief, a coordinator like the launcher of the other ways, is not counted). Sync per step: the
calibration after training (``trainer/worker/calibrate.py``): the median seconds of one all-reduce of the
model's gradients among the run's replicas, the median over its workers; 0 for one replica; unknown (NaN)
for ps (one worker too), whose workers push gradients to the parameter server inside their step and have no
all-reduce.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

WAYS = ("replicas", "workers", "ps")
COUNTED_ROLES = ("trainer", "worker", "ps")  # the chief and perfkit's launcher (worker -1) are not counted


def point_name(way: str | None, n: int) -> str:
    """How a point is named in every output: the baseline, "2 replicas (one process)", "2 workers",
    "2 workers + 1 ps"."""
    s = "s" if n > 1 else ""
    if way is None:
        return "baseline (single process)"
    if way == "replicas":
        return f"{n} replica{s} (one process)"
    return f"{n} worker{s} + 1 ps" if way == "ps" else f"{n} worker{s}"


def way_figures(a: Any, run_id: str, meta: Any, way: str | None, n: int) -> dict[str, Any]:
    """replicas_per_process, processes, memory_per_replica_bytes and sync_s of one run."""
    replicas = n if way in ("replicas", "workers", "ps") else 1
    per_process = n if way == "replicas" else 1
    p = a.processes[a.processes["run_id"] == run_id] if not a.processes.empty else pd.DataFrame()
    counted = p[(p["worker"] >= 0) & p["role"].isin(COUNTED_ROLES)] if not p.empty else p
    rss = counted["rss_peak_bytes"].astype(float) if not counted.empty else pd.Series(dtype=float)
    memory = float(rss.sum()) / replicas if len(rss) and rss.notna().all() else math.nan
    return {"replicas_per_process": per_process, "processes": len(counted), "memory_per_replica_bytes": memory,
            "sync_s": _sync(meta, replicas, way)}


def _sync(meta: Any, replicas: int, way: str | None) -> float:
    if way == "ps":
        return math.nan
    if replicas == 1:
        return 0.0  # nothing to reduce with
    grads = [float(c["gradients_s"]) for c in ((w.calibration or {}) for w in meta.workers)
             if isinstance(c.get("gradients_s"), (int, float))]
    return float(np.median(grads)) if grads else math.nan


def notes(ways: tuple[str, ...]) -> list[str]:
    """What the ways' figures count, said once under the study."""
    out = []
    if "ps" in ways:
        out.append("ps: memory per replica counts the workers and the parameter server (not the chief); it has "
                   "no all-reduce, so no sync cost per step is measured (each worker's push and pull is inside "
                   "its step)")
    if "replicas" in ways:
        out.append("replicas: one process, MirroredStrategy over N logical CPU devices sharing one intra-op "
                   "thread pool; 1 replica is the baseline itself (not run twice)")
    if set(ways) - {"workers"}:
        out.append("the forecast models the workers way only (a ring all-reduce among worker processes)")
    return out
