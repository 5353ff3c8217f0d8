"""The timeline's tracks (``traceevents.py``): which thread of which process an event is drawn on, a name for
every process and thread, and each sampled process's CPU% and RSS as counters."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfkit.profiler import xplane
from perfkit.results import RunMeta

COUNTER_COLUMNS = ("pid", "tid", "ts_ns", "name", "key", "value")
TRACK_COLUMNS = ("pid", "tid", "name", "sort_index")  # tid -1: the process track itself
COUNTER_TID, STEPS_TID, EPOCHS_TID = 0, 1, 2  # tids of every process; 10+k: lane k of overlapping steps
LINE_TID = 100  # the capture's line i (one OS thread) is tid 100 + i


def counter_events(cpu: pd.DataFrame, pids: dict[tuple[int, str], int], origin: int) -> pd.DataFrame:
    """CPU% and RSS of each sampled process (``cpu``: worker, host, pid, t_ns, cpu_percent, rss_bytes), on
    its worker's (or launcher's) track; a worker with several processes (children) gets one counter per
    process, named by its OS pid."""
    if cpu.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("pid", "tid", "ts_ns") else "float64"
                                          if c == "value" else object) for c in COUNTER_COLUMNS})
    worker = cpu["worker"].astype("int64")
    of_worker = pd.Series({w: p for (w, _), p in pids.items() if w >= 0}, dtype="int64")
    of_launcher = pd.Series({h: p for (w, h), p in pids.items() if w < 0}, dtype="int64")
    launched = (worker < 0).to_numpy()
    track = pd.Series(np.where(launched, cpu["host"].astype(str).map(of_launcher).to_numpy(dtype=float),
                               worker.map(of_worker).to_numpy(dtype=float)), index=cpu.index).astype("int64")
    several = (cpu.groupby(track)["pid"].transform("nunique") > 1).to_numpy()
    suffix = pd.Series("", index=cpu.index, dtype=object)
    suffix[several] = " pid " + cpu["pid"][several].astype("int64").astype(str)
    frames, ts = [], cpu["t_ns"].astype("int64") - origin
    for name, unit, col in (("CPU", "percent", "cpu_percent"), ("RSS", "bytes", "rss_bytes")):
        value = cpu[col].astype("float64")
        ok = np.isfinite(value.to_numpy())  # JSON has no NaN: a sample without a value is left out
        frames.append(pd.DataFrame({"pid": track[ok], "tid": COUNTER_TID, "ts_ns": ts[ok],
                                    "name": (name + suffix)[ok], "key": unit, "value": value[ok]}))
    out = pd.concat(frames, ignore_index=True)
    return out.sort_values(["pid", "name", "ts_ns"], kind="stable", ignore_index=True)


def track_names(meta: RunMeta, pids: dict[tuple[int, str], int], slices: pd.DataFrame, instants: pd.DataFrame,
            counters: pd.DataFrame, captures: dict[int, xplane.CaptureEvents]) -> pd.DataFrame:
    """A name for every process and every (pid, tid) an event uses."""
    hosts = {**{i: h for i, h in meta.cluster.host_of().items()},
             **{w.index: w.host for w in meta.workers if w.host}}
    roles = {w.index: w.role for w in meta.workers}
    rows = []
    for (w, host), pid in pids.items():
        role = roles.get(w) or "worker"
        role = "worker" if role in ("worker", "trainer") else role
        name = f"launcher ({host})" if w < 0 else f"{role} {w} ({hosts.get(w) or '?'})"
        rows.append((pid, -1, name, pid))
    worker_of = {pid: w for (w, _), pid in pids.items()}
    lines = {w: (c.lines, set(c.events.loc[c.events["epoch"] >= 0, "line"].tolist())) for w, c in captures.items()}
    used = pd.concat([df[["pid", "tid"]] for df in (slices, instants, counters)]).drop_duplicates()
    for pid, tid in sorted(map(tuple, used.to_numpy("int64").tolist())):
        rows.append((pid, tid, *_thread(tid, *lines.get(worker_of.get(pid, -1), ((), set())))))
    return pd.DataFrame(rows, columns=list(TRACK_COLUMNS))


def _thread(tid: int, names: tuple[str, ...], main: set[int]) -> tuple[str, int]:
    """A thread track's name and sort index: steps, epochs, then the capture's threads (the Python main
    thread, which holds the step markers, first), numbered where one name has several lines."""
    fixed = {COUNTER_TID: "counters", STEPS_TID: "steps", EPOCHS_TID: "epochs"}
    if tid in fixed:
        return fixed[tid], tid
    if tid < LINE_TID:
        return f"steps (overlapping, lane {tid - 10 + 1})", tid
    line = tid - LINE_TID
    name = names[line] if line < len(names) else f"thread {line}"
    nth = names[:line].count(name)
    return (f"{name} #{nth + 1}" if nth else name), (LINE_TID - 1 if line in main else tid)
