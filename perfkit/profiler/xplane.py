"""A worker's ``.xplane.pb`` (one TF profiler capture) -> per-step time breakdown and top ops.

Why the protobuf classes shipped in TensorFlow, not xprof's converters: measured on a 0.7 MB capture of
6 steps, parsing the XSpace directly took 0.013 s (plus 0.05 s to load the generated module), while xprof's
``trace_viewer`` conversion took 0.58 s and produced 4.6 MB of JSON to parse again, and its
``overview_page`` (0.17 s) aggregates steps without a per-step collective split. The raw XPlane also keeps
what the split needs: Keras' ``train`` step markers with their ``epoch_num``/``step_num`` stats and every
op event with picosecond bounds on its own thread. A damaged file fails cleanly in ``ParseFromString``
(DecodeError) instead of inside a C++ converter. The generated module is loaded from TensorFlow's package
by file path, so analysing traces does not import TensorFlow (~7 s).

How a step is split (all on the host plane, clipped to the step's ``train`` event). Collective ops are
launched as each gradient is ready and stay open while the rest of the backward pass runs, so their wall
time overlaps compute; only the part with no compute op of the worker running is communication (or
waiting) that the step pays for (the overlap analysis of Holistic Trace Analysis):
- compute_s: union of TF op events (``name:Type``) outside tf.data's own threads, other than collective
  and input ops.
- collective_s: union of collective op events (CollectiveReduceV2 and friends: all-reduce, gather,
  broadcast, NCCL) while no compute op runs: exposed communication. A fast worker's exposed all-reduce
  lasts as long as it waits for the slowest one.
- input_s: union of iterator get-next events while neither compute nor a collective runs.
- other_s: the rest of the step (Python, Keras, function dispatch).
So step_s = compute_s + collective_s + input_s + other_s. Beside them, collective_total_s is the whole
union of collective events and overlap_s its part hidden under compute (collective_total_s - collective_s);
collectives counts the step's collective ops and allreduce_max_s is the longest one; collective_gaps_s is
the time, between the first collective's start and the last one's end, in which no op of the step runs
(part of other_s): the dispatch gaps of a chain of collectives that TensorFlow runs one after another
(measured, 4 local workers on 2 cores, quick preset: 14 ms of a 221 ms step around 22 collectives, 6 ms
around 7). MultiWorkerMirrored
packs every gradient into one all-reduce (``bytes_per_pack=0``), so that longest op is the gradient
all-reduce (with any wait for a peer in it); the others are tf-keras' per-step reductions of the loss and
metric states (one small collective each, latency-bound).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from perfkit.errors import ResultsError

STEP_EVENT = "train"  # tf-keras wraps every training step in Trace("train", epoch_num=.., step_num=..)
INPUT_OP_TYPES = frozenset({"IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional",
                            "MultiDeviceIteratorGetNextFromShard"})
INPUT_EVENTS = ("IteratorGetNextOp::DoCompute", "GetNextFromShard")
STEP_COLUMNS = ("epoch", "step", "t_start_ns", "step_s", "compute_s", "collective_s", "input_s", "other_s",
                "collective_total_s", "overlap_s", "collectives", "allreduce_max_s", "collective_gaps_s")
# Bumped whenever what parse() returns changes: cached trace tables of older versions are parsed again.
PARSER_VERSION = 3
OP_COLUMNS = ("name", "category", "count", "total_s")
EVENT_COLUMNS = ("line", "thread", "name", "start_ns", "end_ns", "category", "op_type", "epoch", "step")
_PB2_MODULE = "tensorflow.tsl.profiler.protobuf.xplane_pb2"


class XPlaneError(ResultsError):
    """A capture file that cannot be read or holds no training steps."""


@dataclass(frozen=True)
class ParsedTrace:
    steps: pd.DataFrame  # STEP_COLUMNS, one row per traced step
    ops: pd.DataFrame  # OP_COLUMNS, op types by self time, largest first
    hostnames: tuple[str, ...]


@dataclass(frozen=True)
class CaptureEvents:
    """A capture's raw events for a timeline: ``events`` has EVENT_COLUMNS, one row per event of the host
    plane: its ``line`` (an index into ``lines``, the thread names), TF name, exact wall-clock bounds in
    ns, ``category`` ("compute", "collective", "input" or "") and ``op_type`` as ``parse`` classifies them,
    and the epoch/step of a Keras ``train`` step marker (-1 on every other event)."""

    events: pd.DataFrame
    lines: tuple[str, ...]
    hostnames: tuple[str, ...]


def _xplane_pb2() -> ModuleType:
    if _PB2_MODULE in sys.modules or "tensorflow" in sys.modules:
        return importlib.import_module(_PB2_MODULE)  # TF is loaded already: no cost, one registration
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or spec.origin is None:
        raise XPlaneError("cannot read .xplane.pb files: TensorFlow (which ships their schema) is not installed")
    path = Path(spec.origin).parent / "tsl" / "profiler" / "protobuf" / "xplane_pb2.py"
    mod_spec = importlib.util.spec_from_file_location(_PB2_MODULE, path)
    if mod_spec is None or mod_spec.loader is None:
        raise XPlaneError(f"cannot load the XPlane schema from {path}")
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    sys.modules[_PB2_MODULE] = module  # TF importing it later reuses this module
    return module


def read_xspace(path: Path) -> Any:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise XPlaneError(f"{path}: cannot read the profiler capture ({exc.strerror or exc})") from None
    space = _xplane_pb2().XSpace()
    try:
        space.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError type differs between backends
        raise XPlaneError(f"{path}: corrupt or truncated profiler capture ({type(exc).__name__})") from None
    return space


def parse(path: str | Path) -> ParsedTrace:
    """Per-step breakdown and top ops of one capture; XPlaneError names the file when it is unusable."""
    path = Path(path)
    space = read_xspace(path)
    events, marks = _events(_host_plane(space, path), _start_ns(space))
    if marks.empty:
        raise XPlaneError(f"{path}: no training step markers ('{STEP_EVENT}') in the profiler capture")
    events = _classify(events)  # once: both the step split and the op table use the categories
    return ParsedTrace(steps=_breakdown(marks, events), ops=_top_ops(events), hostnames=tuple(space.hostnames))


def capture_events(path: str | Path) -> CaptureEvents:
    """Every event of one capture's host plane, classified as ``parse`` classifies them (for a timeline
    export); a capture without step markers is no error here. XPlaneError names the file when unusable."""
    path = Path(path)
    space = read_xspace(path)
    host = _host_plane(space, path)
    events, marks = _events(host, _start_ns(space))
    events = _classify(events)
    epoch = np.full(len(events), -1, dtype="int64")
    step = epoch.copy()
    rows = marks["row"].to_numpy(dtype="int64")
    epoch[rows], step[rows] = marks["epoch"].to_numpy(), marks["step"].to_numpy()
    events = events.assign(epoch=epoch, step=step)
    return CaptureEvents(events=events[list(EVENT_COLUMNS)], lines=tuple(ln.name.split("/")[0] for ln in host.lines),
                         hostnames=tuple(space.hostnames))


def _host_plane(space: Any, path: Path) -> Any:
    host = next((p for p in space.planes if p.name == "/host:CPU"), None)
    if host is None:
        raise XPlaneError(f"{path}: no host plane in the profiler capture")
    return host


def _start_ns(space: Any) -> int:
    """Event times are relative to the capture start, recorded on the 'Task Environment' plane."""
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for stat in plane.stats:
            if names.get(stat.metadata_id) == "profile_start_time":
                return int(stat.uint64_value)
    return 0


def _events(plane: Any, origin_ns: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every event of the plane (thread, name, start/end in ns: wall clock when the capture records its
    start) and, separately, the step markers with their epoch and step numbers and event row.

    ``start``/``end`` are float ns (what the step split uses); ``line``, ``start_ns`` and ``end_ns`` are the
    event's line (one per OS thread; several lines can share a thread name) and its exact integer bounds,
    which a float64 near 1.8e18 ns (256 ns apart) cannot hold."""
    meta, stat_names = plane.event_metadata, {k: v.name for k, v in plane.stat_metadata.items()}
    threads, names, starts, durations, marks, lines, offsets = [], [], [], [], [], [], []
    bases = []
    for i, line in enumerate(plane.lines):
        bases.append(origin_ns + line.timestamp_ns)
        base_ps = bases[-1] * 1000
        thread = line.name.split("/")[0]
        for ev in line.events:
            name = meta[ev.metadata_id].name
            threads.append(thread)
            names.append(name)
            starts.append(base_ps + ev.offset_ps)
            durations.append(ev.duration_ps)
            lines.append(i)
            offsets.append(ev.offset_ps)
            if name == STEP_EVENT:
                stats = _stats(ev, stat_names)
                if "step_num" in stats:
                    marks.append({"epoch": int(stats.get("epoch_num", -1)), "step": int(stats["step_num"]),
                                  "start": (base_ps + ev.offset_ps) / 1000.0,
                                  "end": (base_ps + ev.offset_ps + ev.duration_ps) / 1000.0, "row": len(names) - 1})
    start = np.asarray(starts, dtype="float64") / 1000.0
    events = pd.DataFrame({"thread": threads, "name": names, "start": start,
                           "end": start + np.asarray(durations, dtype="float64") / 1000.0})
    line = np.asarray(lines, dtype="int64")
    offset_ps = np.asarray(offsets, dtype="int64")
    base_ns = np.asarray(bases, dtype="int64")[line] if bases else np.zeros(0, dtype="int64")
    events = events.assign(line=line, start_ns=base_ns + offset_ps // 1000,
                           end_ns=base_ns + (offset_ps + np.asarray(durations, dtype="int64")) // 1000)
    return events, pd.DataFrame(marks, columns=["epoch", "step", "start", "end", "row"])


def _stats(event: Any, names: dict[int, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stat in event.stats:
        kind = stat.WhichOneof("value")
        out[names.get(stat.metadata_id, str(stat.metadata_id))] = getattr(stat, kind) if kind else None
    return out


def _classify(events: pd.DataFrame) -> pd.DataFrame:
    """TF op events are named ``scope/op:Type``; framework events use ``A::B`` or ``Name: detail``.

    Each distinct name (and thread) is classified once: a capture repeats few names over many events (a
    4-worker quick run's: 974 names in 45k events, 60 ms -> 10 ms)."""
    codes, names = pd.factorize(events["name"])
    name = pd.Series(names, dtype=object)
    is_op = name.str.contains(":", regex=False) & ~name.str.contains("::|: ", regex=True)
    op_type = name.str.rsplit(":", n=1).str[-1].where(is_op, "")
    collective = is_op & (op_type.str.startswith("Collective") | op_type.str.startswith("Nccl"))
    input_ = (is_op & op_type.isin(INPUT_OP_TYPES)) | name.str.startswith(INPUT_EVENTS)
    wrapper = op_type.isin({"PartitionedCall", "StatefulPartitionedCall"}) | name.str.startswith("__inference")
    thread_codes, threads = pd.factorize(events["thread"])
    tf_data = pd.Series(threads, dtype=object).str.startswith("tf_data").to_numpy(dtype=bool)[thread_codes]
    compute = (is_op & ~collective & ~input_ & ~wrapper).to_numpy(dtype=bool)[codes] & ~tf_data
    collective, input_ = collective.to_numpy(dtype=bool)[codes], input_.to_numpy(dtype=bool)[codes]
    category = np.select([collective, input_, compute], ["collective", "input", "compute"], default="")
    return events.assign(op_type=op_type.to_numpy(dtype=object)[codes], category=category)


def union_seconds(start: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of intervals [start, end) in ns, returned in seconds."""
    if len(start) == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    seg_start = s[new]
    seg_end = np.maximum.reduceat(e, np.flatnonzero(new))
    return float(np.sum(seg_end - seg_start)) / 1e9


def _breakdown(marks: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    ev = events[events["category"] != ""]
    rows = []
    for mark in marks.sort_values("start").itertuples(index=False):  # one row per traced step
        inside = ev[(ev["end"] > mark.start) & (ev["start"] < mark.end)]
        s = inside["start"].clip(lower=mark.start).to_numpy()
        e = inside["end"].clip(upper=mark.end).to_numpy()
        rows.append({"epoch": mark.epoch, "step": mark.step, "t_start_ns": int(mark.start),
                     **split_step((mark.end - mark.start) / 1e9, s, e, inside["category"].to_numpy())})
    return pd.DataFrame(rows, columns=list(STEP_COLUMNS))


def split_step(step_s: float, start: np.ndarray, end: np.ndarray, category: np.ndarray) -> dict[str, float]:
    """One step's split by priority compute > collective > input > other (see the module docstring)."""
    comp = category == "compute"
    comm = category == "collective"
    both = comp | comm
    busy_comp = union_seconds(start[comp], end[comp])
    busy_both = union_seconds(start[both], end[both])
    busy_all = union_seconds(start, end)
    total_comm = union_seconds(start[comm], end[comm])
    exposed = busy_both - busy_comp
    longest = float(np.max(end[comm] - start[comm])) / 1e9 if comm.any() else 0.0
    return {"step_s": step_s, "compute_s": busy_comp, "collective_s": exposed, "input_s": busy_all - busy_both,
            "other_s": max(0.0, step_s - busy_all), "collective_total_s": total_comm,
            "overlap_s": max(0.0, total_comm - exposed), "collectives": int(comm.sum()), "allreduce_max_s": longest,
            "collective_gaps_s": collective_gaps(start, end, comm)}


def collective_gaps(start: np.ndarray, end: np.ndarray, comm: np.ndarray) -> float:
    """Seconds between the first collective's start and the last one's end with no event running: what a
    serial chain of collectives costs beyond the ops themselves (none with fewer than two collectives)."""
    if int(comm.sum()) < 2:
        return 0.0
    lo, hi = float(np.min(start[comm])), float(np.max(end[comm]))
    busy = union_seconds(np.clip(start, lo, hi), np.clip(end, lo, hi))
    return max(0.0, (hi - lo) / 1e9 - busy)


def _top_ops(events: pd.DataFrame, limit: int = 25) -> pd.DataFrame:
    """Op types by self time: an op event's duration less the op events nested in it on its thread."""
    ev = events[events["op_type"] != ""].sort_values(["thread", "start", "end"], ascending=[True, True, False])
    self_ns = (ev["end"] - ev["start"]).to_numpy().copy()
    child_ns = _nested_child_time(ev["thread"].to_numpy(), ev["start"].to_numpy(), ev["end"].to_numpy())
    ev = ev.assign(self_s=(self_ns - child_ns) / 1e9)
    cat = ev["category"].replace("", "other")
    out = ev.assign(category=cat).groupby(["op_type", "category"], as_index=False).agg(
        count=("self_s", "size"), total_s=("self_s", "sum"))
    out = out.rename(columns={"op_type": "name"}).sort_values("total_s", ascending=False).head(limit)
    return out[list(OP_COLUMNS)].reset_index(drop=True)


def _nested_child_time(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Time of each event's direct children (events sorted by thread, start, longest first)."""
    child = np.zeros(len(start))
    stack: list[int] = []
    for i in range(len(start)):  # op events of one capture: a stack walk is linear and small
        while stack and (thread[stack[-1]] != thread[i] or start[i] >= end[stack[-1]]):
            stack.pop()
        if stack:
            child[stack[-1]] += min(end[i], end[stack[-1]]) - start[i]
        stack.append(i)
    return child
