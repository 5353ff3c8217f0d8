"""A run -> the events of one timeline: every worker's steps, epochs, validation, restarts, CPU% and RSS, and
its traced window's TensorFlow events, on one clock (for ``perfkit export``, ``renderers/perfetto.py``).

Clock: steps, epochs and CPU samples are recorded on each machine's ``time.monotonic_ns`` (the sampler runs
in the launcher, or in the process it samples, on the same machine). Each is moved onto the wall clock with
run.json's anchors (wall = mono + anchor_wall_ns - anchor_mono_ns): a worker's steps and epochs with its own
anchor, a part's CPU samples with the median anchor of its workers (the launcher records none). The
captures' events are on the wall clock already (``xplane.capture_events``). Every time is then counted from
the run's earliest one (``origin_wall_ns``), in ns; the renderer writes microseconds.

Unlike ``LoadedRun.record``, which keeps each epoch's final attempt, every recorded step and epoch is here,
with its ``attempt``: a restarted cluster's earlier attempts are part of what happened.

The cap (``max_events`` in the file, metadata aside; XProf's trace viewer stops at a million events) and
what it keeps: ``perfkit.analysis.tracecap``. The CPU samples are read where they lie, as the analysis reads
them (``perfkit.analysis.cpusamples``): a long run's would not fit in memory as events.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from perfkit.analysis.cpusamples import CpuSamples
from perfkit.analysis.load import LoadedRun
from perfkit.analysis.tracecap import Cap, cap_notes, capped_trace, counter_bins, fitting_steps
from perfkit.analysis.tracetables import profile_workers
from perfkit.analysis.tracetracks import COUNTER_TID, EPOCHS_TID, LINE_TID, STEPS_TID, counter_events, track_names
from perfkit.profiler import xplane
from perfkit.results import RunMeta, RunRecord

DEFAULT_MAX_EVENTS = 1_000_000
SLICE_COLUMNS = ("pid", "tid", "ts_ns", "dur_ns", "name", "cat", "epoch", "step", "attempt", "samples", "op_type")
INSTANT_COLUMNS = ("pid", "tid", "ts_ns", "name", "cat", "scope", "detail")
_WALL_2001 = 10**18  # ns: a capture without its start time has times from 0, which no wall clock reads
ALWAYS_KEPT = ("step", "epoch", "validation", "step_marker")  # slice categories not of the traced window


@dataclass(frozen=True)
class TraceEvents:
    """One run's timeline. Times are ns from ``origin_wall_ns``; ``tracks`` names every pid and tid used."""

    run_id: str
    origin_wall_ns: int
    slices: pd.DataFrame  # SLICE_COLUMNS; epoch/step/attempt/samples -1 and op_type "" where not applicable
    instants: pd.DataFrame  # INSTANT_COLUMNS
    counters: pd.DataFrame  # tracetracks.COUNTER_COLUMNS
    tracks: pd.DataFrame  # tracetracks.TRACK_COLUMNS
    cap: Cap
    workers: tuple[int, ...]  # every worker (task) with a process track; launchers have their own
    traced: tuple[int, ...]  # workers whose traced window is in
    notes: tuple[str, ...]  # what is missing and why, in words

    def counts(self) -> dict[str, int]:
        """Events by kind, as the file holds them (metadata left out)."""
        cat = self.slices["cat"]
        kinds = {"steps": "step", "epochs": "epoch", "validation": "validation", "step_markers": "step_marker"}
        out = {k: int((cat == v).sum()) for k, v in kinds.items()}
        out["trace_events"] = int((~cat.isin(ALWAYS_KEPT)).sum())
        out["collectives"] = int((cat == "collective").sum())
        return {**out, "instants": len(self.instants), "counters": len(self.counters)}


@dataclass(frozen=True)
class _Part:
    """One run directory's records on the wall clock (ns, absolute), and its workers' captures."""

    steps: pd.DataFrame
    epochs: pd.DataFrame
    captures: tuple[tuple[int, xplane.CaptureEvents], ...]
    restarts: tuple[dict, ...]
    notes: tuple[str, ...]


def trace_events(run: LoadedRun, max_events: int = DEFAULT_MAX_EVENTS,
                 workers: set[int] | None = None) -> TraceEvents:
    """Every worker's records and traced window of ``run`` (``workers``: only these, and the launchers) as
    slices, instants and counters on one clock, within ``max_events`` (0: all) as ``tracecap`` says."""
    parts = [_load_part(p, workers) for p in run.paths]
    cpu = CpuSamples.of(run.record, files=run.cpu_files)
    pids = _pids(run.meta, parts, cpu, workers)
    steps = pd.concat([p.steps for p in parts], ignore_index=True)
    epochs = pd.concat([p.epochs for p in parts], ignore_index=True)
    trace = [(w, c) for p in parts for w, c in p.captures]
    restarts = [r for p in parts for r in p.restarts]
    origin = _origin(steps, epochs, cpu, trace, restarts)
    epoch_slices, instants = _epoch_slices(epochs, pids, origin), _instants(steps, restarts, pids, origin)
    samples, processes = cpu.sample_count(workers)
    bins = counter_bins(max_events, samples, processes)
    counters = counter_events(cpu.counter_points(bins, workers), pids, origin)
    traced = _trace_slices(trace, pids, origin)
    markers = int((traced["cat"] == "step_marker").sum())
    room = max_events - len(epoch_slices) - len(instants) - len(counters) - markers if max_events else None
    kept, left_out = fitting_steps(steps, room)
    step_slices = _step_slices(kept, pids, origin)
    trace_slices, cap = capped_trace(traced, max_events,
                                     len(epoch_slices) + len(instants) + len(counters) + len(step_slices))
    span = cpu.span_s() / bins if bins else None
    cap = replace(cap, counter_samples=samples, counter_bin_s=span, steps_left_out=left_out,
                  steps_dropped=len(steps) - len(kept))
    slices = pd.concat([step_slices, epoch_slices, trace_slices], ignore_index=True)
    # Per track by start, a parent before the slices it holds (same start: the longer first), the order in
    # which a trace viewer nests slices that start together.
    slices = slices.iloc[np.lexsort((-slices["dur_ns"].to_numpy(), slices["ts_ns"].to_numpy(),
                                     slices["tid"].to_numpy(), slices["pid"].to_numpy()))].reset_index(drop=True)
    why = [n for p in parts for n in p.notes]
    notes = _trace_notes(run, {w for w, _ in trace}, bool(why)) + why + cap_notes(cap, cap.steps_dropped)
    tracks = track_names(run.meta, pids, slices, instants, counters, dict(trace))
    return TraceEvents(run.run_id, origin, slices, instants, counters, tracks, cap,
                       tuple(sorted(w for w, _ in pids if w >= 0)), tuple(sorted({w for w, _ in trace})),
                       tuple(notes))


# -- reading a part -------------------------------------------------------------------------------------


def _load_part(path: Path, workers: set[int] | None) -> _Part:
    """Every attempt's rows of one run directory (``workers``': every worker's when None), moved onto the wall
    clock, and its captures. Its CPU samples are read by ``CpuSamples``, where they lie."""
    record = RunRecord.load(path, samples=False)  # every attempt: LoadedRun.record keeps only final attempts
    meta = record.run
    own = {w.index: w.clock_offset_ns for w in meta.workers if w.clock_offset_ns is not None}
    median = sorted(own.values())[len(own) // 2] if own else None
    # Without anchors a part's records stay on its one monotonic clock: only its captures cannot be placed.
    captured = any(w.get("status") == "captured" for w in profile_workers(meta).values())
    notes = [f"{path.name}: traced window left out: no wall-clock anchor in run.json to place it"] \
        if median is None and captured else []

    def wall(df: pd.DataFrame, cols: tuple[str, ...], by_worker: bool) -> pd.DataFrame:
        if df.empty:
            return df
        shift = df["worker"].map(own).fillna(median or 0) if by_worker else pd.Series(median or 0, df.index)
        return df.assign(**{c: df[c].astype("int64") + shift.astype("int64") for c in cols})

    def mine(df: pd.DataFrame) -> pd.DataFrame:
        return df if workers is None or df.empty else df[df["worker"].isin(workers)]

    captures, why = _captures(path, meta) if median is not None else ((), [])
    captures = tuple((w, c) for w, c in captures if workers is None or w in workers)
    steps = wall(_with_attempt(mine(record.steps)), ("t_start_ns", "t_end_ns"), True)
    captures, moved = _aligned(captures, steps)
    return _Part(steps=steps,
                 epochs=wall(_with_attempt(mine(record.epochs)), ("t_start_ns", "t_end_ns"), True), captures=captures,
                 restarts=tuple(r for r in meta.restarts if isinstance(r, dict)), notes=tuple(notes + why + moved))


ALIGN_BEYOND_NS = 1_000_000  # a marker opens 5-45 us before its recorded step; more is the capture's clock


def _aligned(captures: tuple[tuple[int, xplane.CaptureEvents], ...], steps: pd.DataFrame
             ) -> tuple[tuple[tuple[int, xplane.CaptureEvents], ...], list[str]]:
    """Each capture moved onto its worker's step records by its Keras step markers, where they disagree.

    A capture's times come from its own start time (``profile_start_time``) plus offsets; on a CI machine
    that start was measured 22 ms away from the worker's anchored step records, whose markers it holds. The
    median offset between a marker and the recorded step of the same (epoch, step) is that error; it is
    taken out when it is larger than a marker's own lead, and the file's notes say by how much."""
    out, notes = [], []
    for worker, capture in captures:
        ev = capture.events
        marks = ev[ev["epoch"] >= 0][["epoch", "step", "start_ns"]]
        own = steps[steps["worker"] == worker]
        if "attempt" in own.columns and not own.empty:
            own = own[own["attempt"] == own["attempt"].max()]
        joined = marks.merge(own[["epoch", "step", "t_start_ns"]], on=["epoch", "step"])
        relative = (not ev.empty
                    and int(ev["start_ns"].min()) < _WALL_2001)  # no profile_start_time (TF 2.16 writes none)
        if joined.empty:
            if relative:
                notes.append(f"worker {worker}: traced window left out: its capture records no wall-clock start "
                             f"and no step marker to place it by")
            else:
                out.append((worker, capture))
            continue
        offset = int(np.median(joined["t_start_ns"].to_numpy("int64") - joined["start_ns"].to_numpy("int64")))
        if abs(offset) <= ALIGN_BEYOND_NS:
            out.append((worker, capture))
            continue
        moved = ev.assign(start_ns=ev["start_ns"] + offset, end_ns=ev["end_ns"] + offset)
        out.append((worker, replace(capture, events=moved)))
        notes.append(f"worker {worker}: its capture records no wall-clock start (this TensorFlow writes none); "
                     f"placed by its {len(joined)} step markers" if relative else
                     f"worker {worker}: its capture's clock was {offset / 1e6:+.1f} ms off its step records; "
                     f"placed by its {len(joined)} step markers")
    return tuple(out), notes


def _with_attempt(df: pd.DataFrame) -> pd.DataFrame:
    """Runs recorded before restarts existed have no ``attempt`` column: all their rows are attempt 0."""
    return df if "attempt" in df.columns or df.empty else df.assign(attempt=0)


def _captures(path: Path, meta: RunMeta) -> tuple[tuple[tuple[int, xplane.CaptureEvents], ...], list[str]]:
    """Each captured worker's events (its final attempt's capture, the one run.json names)."""
    out, notes = [], []
    for k, entry in sorted(profile_workers(meta).items(), key=lambda kv: int(kv[0])):
        if entry.get("status") != "captured" or not entry.get("file"):
            continue
        try:
            capture = xplane.capture_events(path / str(entry["file"]))
        except xplane.XPlaneError as exc:
            notes.append(f"worker {k}: traced window left out: {exc}")
            continue
        out.append((int(k), capture))  # one without a wall-clock start is placed by its markers (_aligned)
    return tuple(out), notes


def _trace_notes(run: LoadedRun, traced: set[int], unread: bool) -> list[str]:
    """Why the file has no traced window, or whose is missing (parameter servers trace none); first, the
    notes on each capture that could not be used follow."""
    if not traced:
        why = "no capture could be used" if unread else run.no_trace or "no capture"
        return ["no traced window" + ("" if why == "no trace window" else f": {why}")]
    missing = sorted({w.index for w in run.meta.workers if w.role != "ps"} - traced)
    if not missing:
        return []
    return [f"no traced window of worker{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"]


# -- pids, origin ----------------------------------------------------------------------------------------


def _pids(meta: RunMeta, parts: list[_Part], cpu: CpuSamples, only: set[int] | None) -> dict[tuple[int, str], int]:
    """(worker, "") -> pid for every worker (pid = index + 1), then (-1, host) for each part's launcher."""
    sampled = cpu.query("SELECT DISTINCT worker, host FROM procs")
    workers = {w.index for w in meta.workers} | {int(w) for p in parts for df in (p.steps, p.epochs)
                                                 if not df.empty for w in df["worker"].unique() if int(w) >= 0}
    workers |= {int(w) for w in sampled["worker"] if w >= 0}
    pids = {(w, ""): w + 1 for w in sorted(workers) if only is None or w in only}
    launchers = sorted({str(h) for w, h in zip(sampled["worker"], sampled["host"], strict=True) if w < 0})
    base = max(pids.values(), default=0) + 1
    return {**pids, **{(-1, h): base + i for i, h in enumerate(launchers)}}


def _origin(steps: pd.DataFrame, epochs: pd.DataFrame, cpu: CpuSamples,
            trace: list[tuple[int, xplane.CaptureEvents]], restarts: list[dict]) -> int:
    firsts = [int(df[c].min()) for df, c in ((steps, "t_start_ns"), (epochs, "t_start_ns")) if not df.empty]
    [(first_sample,)] = cpu.db.con.execute("SELECT min(t_ns) FROM samples").fetchall()
    firsts += [int(first_sample)] if first_sample is not None else []
    firsts += [int(c.events["start_ns"].min()) for _, c in trace if not c.events.empty]
    firsts += [int(r["t_wall_ns"]) for r in restarts if isinstance(r.get("t_wall_ns"), int)]
    return min(firsts, default=0)


# -- slices ----------------------------------------------------------------------------------------------


def _slices(n: int, **cols: object) -> pd.DataFrame:
    """A slice frame of ``n`` rows: the columns given, the rest at their 'not applicable' value."""
    blank: dict[str, object] = {"epoch": -1, "step": -1, "attempt": -1, "samples": -1, "op_type": ""}
    data = {c: cols.get(c, blank.get(c)) for c in SLICE_COLUMNS}
    # Text columns stay object arrays: pandas' default string dtype would copy every name into Arrow (a third
    # of the export's time on a quick run) only for the renderer to read them back as Python strings.
    texts = ("name", "cat", "op_type")
    return pd.DataFrame({c: pd.Series(np.asarray(v if isinstance(v, (np.ndarray, pd.Series, list)) else [v] * n,
                                                 dtype=object if c in texts else "int64"),
                                      dtype=object if c in texts else "int64") for c, v in data.items()})


def _lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane of each interval (sorted by start) so that no two on one lane overlap: a slice track must nest,
    and steps timed by another process (ParameterServerStrategy) can overlap. One lane when none do."""
    if len(start) < 2 or (start[1:] >= np.maximum.accumulate(end)[:-1]).all():
        return np.zeros(len(start), dtype="int64")
    ends: list[int] = []
    lane = np.zeros(len(start), dtype="int64")
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        free = next((k for k, last in enumerate(ends) if last <= s), len(ends))
        ends[free:free + 1] = [e]
        lane[i] = free
    return lane


def _step_slices(steps: pd.DataFrame, pids: dict[tuple[int, str], int], origin: int) -> pd.DataFrame:
    """Step slices ("e<epoch> s<step>") on each worker's steps track; overlapping ones on extra lanes."""
    if steps.empty:
        return _slices(0)
    df = steps.sort_values(["worker", "t_start_ns"], kind="stable")
    start, end = df["t_start_ns"].to_numpy("int64"), df["t_end_ns"].to_numpy("int64")
    worker = df["worker"].to_numpy("int64")
    lane = np.zeros(len(df), dtype="int64")
    for w in np.unique(worker):
        mine = worker == w
        lane[mine] = _lanes(start[mine], end[mine])
    epoch, step = df["epoch"].to_numpy("int64"), df["step"].to_numpy("int64")
    names = [f"e{e} s{s}" for e, s in zip(epoch.tolist(), step.tolist())]
    return _slices(len(df), pid=[pids[(int(w), "")] for w in worker], tid=np.where(lane == 0, STEPS_TID, 10 + lane),
                   ts_ns=start - origin, dur_ns=np.maximum(end - start, 0), name=names, cat="step", epoch=epoch,
                   step=step, attempt=df["attempt"].to_numpy("int64"),
                   samples=df["samples"].fillna(-1).to_numpy("int64"))


def _epoch_slices(epochs: pd.DataFrame, pids: dict[tuple[int, str], int], origin: int) -> pd.DataFrame:
    """Epoch slices, each with its validation nested in it: from the end of training, ``val_s`` long."""
    if epochs.empty:
        return _slices(0)
    start, end = epochs["t_start_ns"].to_numpy("int64"), epochs["t_end_ns"].to_numpy("int64")
    pid = [pids[(int(w), "")] for w in epochs["worker"]]
    epoch, attempt = epochs["epoch"].to_numpy("int64"), epochs["attempt"].to_numpy("int64")
    whole = _slices(len(epochs), pid=pid, tid=EPOCHS_TID, ts_ns=start - origin, dur_ns=np.maximum(end - start, 0),
                    name=[f"epoch {e}" for e in epoch.tolist()], cat="epoch", epoch=epoch, attempt=attempt)
    val_start = np.minimum(start + np.round(epochs["train_s"].fillna(0).to_numpy() * 1e9).astype("int64"), end)
    val_end = np.minimum(val_start + np.round(epochs["val_s"].fillna(0).to_numpy() * 1e9).astype("int64"), end)
    has = val_end > val_start
    val = _slices(int(has.sum()), pid=list(np.asarray(pid)[has]), tid=EPOCHS_TID, ts_ns=val_start[has] - origin,
                  dur_ns=(val_end - val_start)[has], name="validation", cat="validation", epoch=epoch[has],
                  attempt=attempt[has])
    return pd.concat([whole, val], ignore_index=True)


def _trace_slices(trace: list[tuple[int, xplane.CaptureEvents]], pids: dict[tuple[int, str], int],
                  origin: int) -> pd.DataFrame:
    frames = []
    for worker, capture in trace:
        ev = capture.events
        marker = ev["epoch"].to_numpy() >= 0
        cat = np.where(marker, "step_marker", ev["category"].replace("", "other").to_numpy(dtype=object))
        frames.append(_slices(len(ev), pid=pids[(worker, "")], tid=LINE_TID + ev["line"].to_numpy("int64"),
                              ts_ns=ev["start_ns"].to_numpy("int64") - origin,
                              dur_ns=(ev["end_ns"] - ev["start_ns"]).to_numpy("int64"),
                              name=ev["name"].to_numpy(dtype=object), cat=cat, epoch=ev["epoch"].to_numpy(),
                              step=ev["step"].to_numpy(), op_type=ev["op_type"].to_numpy(dtype=object)))
    return pd.concat(frames, ignore_index=True) if frames else _slices(0)


# -- instants, counters, tracks --------------------------------------------------------------------------


def _instants(steps: pd.DataFrame, restarts: list[dict], pids: dict[tuple[int, str], int],
              origin: int) -> pd.DataFrame:
    """run.json's restarts (on the launcher's track, global), and the first step of each worker's every
    attempt after its first (on its steps track)."""
    rows = []
    launcher = min((p for (w, _), p in pids.items() if w < 0), default=min(pids.values(), default=1))
    for r in restarts:
        if isinstance(r.get("t_wall_ns"), int):
            what = "TF profiler crash" if r.get("profiler_crash") else "failure"
            rows.append((launcher, COUNTER_TID, r["t_wall_ns"] - origin, f"restart: attempt {r.get('attempt')}",
                         "restart", "g", f"{what}: {r.get('after') or ''}".strip()))
    if not steps.empty:
        firsts = steps.sort_values("t_start_ns").groupby(["worker", "attempt"], as_index=False).first()
        for f in firsts[firsts["attempt"] > firsts.groupby("worker")["attempt"].transform("min")].itertuples():
            rows.append((pids[(int(f.worker), "")], STEPS_TID, int(f.t_start_ns) - origin,
                         f"attempt {int(f.attempt)}", "restart", "t",
                         f"first step of attempt {int(f.attempt)}: epoch {int(f.epoch)} step {int(f.step)}"))
    return pd.DataFrame(rows, columns=list(INSTANT_COLUMNS)).astype({"pid": "int64", "tid": "int64",
                                                                     "ts_ns": "int64"})
