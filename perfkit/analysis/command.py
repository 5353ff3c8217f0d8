"""The whole command: its wall time, and its processes' CPU, memory and exit status (docs/figures.md).

Every run has a **command wall time**: run.json's ``started`` (written just before the workers are
started) to its ``ended`` (written once every worker has exited and the sampler has stopped); a run of
several parts runs from the earliest part's start to the latest part's end. run.json records no start or
exit time per process, so the figure includes the launcher's own share of that span (starting each
worker's guard, noticing the last exit, stopping the sampler: a few tenths of a second).

A run of ``perfkit launch`` whose command recorded no steps (``launch.recorded`` false: a program that is
not Python, a script that never imports TensorFlow, one whose training perfkit could not see) has only
these figures: its CPU and memory are taken over the command's whole life (there is no training window),
and every figure built on steps is null with ``NO_STEPS`` as the reason.
"""

from __future__ import annotations

import math
from datetime import datetime

import pandas as pd

from perfkit.analysis.cpu import worker_hosts
from perfkit.analysis.cpusamples import CpuSamples
from perfkit.results import RunMeta

NO_STEPS = "the launched command recorded no steps: only its processes' CPU, memory, exit status and wall time"
STEP_FIGURES = "epoch time, throughput, step split, stragglers and the what-ifs"


def stepless(meta: RunMeta) -> bool:
    """A launched run whose command recorded no steps (``launch.recorded`` is false, not unknown)."""
    return meta.launch.get("recorded") is False


def utc_seconds(text: str | None) -> float | None:
    """run.json's UTC time ("2026-12-02T18:35:10.929Z") in seconds since the epoch, or None."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def command_wall_seconds(meta: RunMeta) -> float:
    """run.json's started to ended, in seconds (NaN when either is missing or they do not increase)."""
    start, end = utc_seconds(meta.started), utc_seconds(meta.ended)
    if start is None or end is None or end <= start:
        return math.nan
    return round(end - start, 3)  # run.json's times are to the millisecond


def command_cpu_seconds(samples: CpuSamples) -> float:
    """CPU-seconds of every worker process over every sample of the run (the launcher left out)."""
    return samples.command_cpu_s()


def command_row(meta: RunMeta, samples: CpuSamples) -> dict[str, object]:
    """The runs-table figures of the whole command (every run has them)."""
    return {"command_wall_s": command_wall_seconds(meta), "command_cpu_s": command_cpu_seconds(samples),
            "steps_note": NO_STEPS if stepless(meta) else None}


def exit_codes(meta: RunMeta) -> dict[int, int | None]:
    """Worker index -> its process's exit status as run.json records it (None: not recorded)."""
    return {w.index: w.exit_code for w in meta.workers}


def worker_indices(meta: RunMeta) -> set[int]:
    """The workers run.json lists (every part's, once merged)."""
    return {w.index for w in meta.workers} or set(worker_hosts(meta))


def stepless_worker_rows(meta: RunMeta, per_worker_cpu: pd.DataFrame, samples: CpuSamples) -> pd.DataFrame:
    """Per worker of a run without steps: CPU% mean/p95, CPU-seconds, peak RSS and most threads over the
    command's whole life, and its exit status; a worker the sampler never saw keeps null figures."""
    hosts = worker_hosts(meta)
    codes = exit_codes(meta)
    ids = sorted(worker_indices(meta) | {int(w) for w in per_worker_cpu["worker"] if w >= 0})
    out = pd.DataFrame({"worker": ids, "host": [hosts.get(w) for w in ids]})
    cpu = per_worker_cpu[per_worker_cpu["worker"] >= 0].drop(columns=["host", "samples"])
    out = out.merge(cpu, on="worker", how="left")
    out["cpu_s"] = out["worker"].map(samples.worker_cpu_s)
    out["exit_code"] = out["worker"].map(codes)
    return out
