"""Where a run's start-up went, worker by worker: from the command's start to each worker's first step, cut
at the states the worker reported (``workers[].phases`` in run.json, from its status.json).

One row per worker and phase: ``launcher`` (the command's start to the worker process's start: data,
namespaces, cgroups, the processes started before it), ``python`` (the process's start to its first state:
the interpreter and perfkit's imports), then one row per reported state until the next one, the last
(``training``) until the worker's first step. A worker forked from the fork server (run.json
``worker_start``) has the launcher's part cut in three: ``launcher`` (until the server started),
``import (fork server)`` (its one TensorFlow import, shared by every worker) and ``fork`` (the import done
until this worker was forked: the launcher's own preparation still going, and the workers forked before
it). ``cpu_s`` is the worker process's own CPU seconds in the phase, every thread's; the rows before the
process's start have none (the server's import CPU is ``worker_start.import_cpu_s``). A worker that
recorded no phases (a run before they were kept, a command that reports no states) has no rows.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from perfkit.analysis.summary import first_steps_wall_ns
from perfkit.results import RunRecord
from perfkit.runmeta import WorkerRecord

COLUMNS = ("worker", "phase", "start_s", "wall_s", "cpu_s")
IMPORT = "import (fork server)"


def startup_phases(record: RunRecord) -> pd.DataFrame:
    started = record.run.command_started_wall_ns
    firsts = first_steps_wall_ns(record)
    server = _fork_server(record.run.worker_start, started)
    rows = []
    for w in record.run.workers:
        if started and w.started_wall_ns and w.phases:
            rows += _rows(w, started, firsts.get(w.index), server)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _fork_server(start: dict[str, Any], started: int | None) -> list[tuple[str, int, float]]:
    """The fork server's cuts of the launcher phase: its start and its imports done, where both are known."""
    t0, t1 = start.get("started_wall_ns"), start.get("ready_wall_ns")
    if start.get("method") != "fork" or not isinstance(t0, int) or not isinstance(t1, int) or not started:
        return []
    return [(IMPORT, max(t0, started), math.nan), ("fork", t1, math.nan)]


def _rows(w: WorkerRecord, started: int, first_step_ns: int | None,
          server: list[tuple[str, int, float]]) -> list[dict[str, Any]]:
    ends = [(p.state, p.t_wall_ns, p.cpu_s if p.cpu_s else math.nan) for p in w.phases]
    if first_step_ns is not None:  # states after the first step (done, calibrating...) are not start-up
        ends = [e for e in ends if e[1] < first_step_ns] + [("", first_step_ns, math.nan)]
    born = int(w.started_wall_ns or 0)
    forked = [c for c in server if c[1] <= born]  # a worker started before its server was ready was not forked
    cuts = [("launcher", started, math.nan), *(forked if len(forked) == len(server) else []), ("python", born, 0.0),
            *ends]
    rows = []
    for (name, t0, c0), (_, t1, c1) in zip(cuts, cuts[1:]):
        rows.append({"worker": w.index, "phase": name, "start_s": (t0 - started) / 1e9, "wall_s": (t1 - t0) / 1e9,
                     "cpu_s": c1 - c0})
    return rows


def phase_summary(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Several runs' phases (runs of one kind): per phase, in the order first seen, the median over runs of
    the median over workers of wall and CPU seconds."""
    per_run = [f.groupby("phase", sort=False)[["wall_s", "cpu_s"]].median() for f in frames if not f.empty]
    if not per_run:
        return pd.DataFrame(columns=["phase", "wall_s", "cpu_s", "runs"])
    both = pd.concat(per_run, keys=range(len(per_run)), names=["run", "phase"]).reset_index()
    order = list(dict.fromkeys(both["phase"]))
    out = both.groupby("phase").agg(wall_s=("wall_s", "median"), cpu_s=("cpu_s", "median"), runs=("run", "nunique"))
    return out.reindex(order).reset_index()
