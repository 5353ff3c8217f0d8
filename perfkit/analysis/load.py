"""Load frozen runs for analysis: schema-checked DataFrames on one wall clock, parts merged.

A run is one directory ``results/<run-id>/`` or, when each host of a cluster ran its own workers, several
``<run-id>--<host>/`` parts copied side by side (their run.json has the same ``run_id`` and a ``part``
key). Parts are merged by run id: every time column of a part (recorded with that machine's
``time.monotonic_ns()``) is moved onto the wall clock with the part's anchors (wall = mono +
anchor_wall_ns - anchor_mono_ns, median over the part's workers), so workers of different hosts line up.
The merged record's meta says ``"clock": "wall"`` and its workers' anchors become (wall, wall).

The loader never drops a run silently: anything that makes a run unusable (status, a missing worker or
file, too few epochs) is listed in ``LoadedRun.problems``. Traces are parsed here, from each part's
profiler captures (``perfkit.analysis.tracetables.load_traces``, cached beside the run); a capture or table that
cannot be read only costs the trace figures (``warnings``), the analysis then falls back to labelled
estimates whose note says why (``no_trace``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
from pandas.api.types import is_numeric_dtype

from perfkit.analysis import runcache, tracetables
from perfkit.analysis.command import utc_seconds
from perfkit.analysis.cpustore import CpuFiles
from perfkit.analysis.summary import final_attempt
from perfkit.analysis.tracetables import TraceTables, load_traces, profile_workers
from perfkit.errors import ResultsError, UsageError
from perfkit.results import RUN_FILE, RunMeta, RunRecord, iter_run_dirs, load_meta

PART_SEP = "--"
TRACE_STEP_COLUMNS = tracetables.TRACE_STEP_COLUMNS  # at least these in LoadedRun.trace (plus V2_COLUMNS)
TRACE_OP_COLUMNS = tracetables.TRACE_OP_COLUMNS
_NUMERIC = {
    "steps": ("epoch", "step", "t_start_ns", "t_end_ns", "duration_s", "samples"),
    "epochs": ("epoch", "t_start_ns", "t_end_ns", "train_s", "val_s"),
}


@dataclass(frozen=True)
class LoadedRun:
    """One run ready for analysis. ``record``'s tables hold only each epoch's final attempt, on one clock."""

    run_id: str
    paths: tuple[Path, ...]
    record: RunRecord
    trace: pd.DataFrame | None = None  # every part's parsed trace steps, or None (absent or unusable)
    trace_ops: pd.DataFrame | None = None
    no_trace: str = "no trace window"  # why ``trace`` is None, in words for the figures' notes
    problems: tuple[str, ...] = ()  # why the run cannot be analysed; empty = usable
    warnings: tuple[str, ...] = ()
    cached: runcache.Cached | None = None  # its figures from the analysis cache (then ``record`` has no tables)
    inputs: dict[str, Any] | None = None  # the cache's key of its files before they were read (cache on)
    cpu_files: CpuFiles = CpuFiles()  # its CPU samples, left on disk (``record.cpu`` is then empty)

    @property
    def meta(self) -> RunMeta:
        return self.record.run

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def mode(self) -> str:
        return self.meta.mode or "?"

    @property
    def num_workers(self) -> int:
        return self.meta.num_workers

    @property
    def sort_key(self) -> tuple[str, str]:
        return self.meta.started or "", self.run_id


@dataclass(frozen=True)
class Excluded:
    run_id: str
    path: str
    reason: str


@dataclass(frozen=True)
class LoadResult:
    runs: tuple[LoadedRun, ...]
    excluded: tuple[Excluded, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def load_runs(paths: Sequence[Path] | None, results_dir: Path) -> LoadResult:
    """Every run under ``results_dir`` (paths None) or the named run directories (and their sibling parts).

    A named directory that is not a perfkit run, or has a newer schema, raises ResultsError; in a scan
    of ``results_dir`` such a directory is listed in ``excluded`` instead.
    """
    if paths:
        groups, excluded = _named_groups(paths), []
    else:
        if results_dir.exists() and not results_dir.is_dir():
            raise UsageError(f"--results-dir: {results_dir} is not a directory")
        groups, excluded = _scan_groups(iter_run_dirs(results_dir))
    runs = tuple(sorted((merge_parts(rid, parts) for rid, parts in groups.items()), key=lambda r: r.sort_key))
    return LoadResult(runs=runs, excluded=tuple(excluded))


def find_run(results_dir: Path, run_id: str) -> LoadedRun | None:
    """The run ``run_id`` under ``results_dir`` (a directory of that name, or its parts), or None."""
    groups, _ = _scan_groups(p for p in iter_run_dirs(results_dir)
                             if p.name == run_id or p.name.startswith(run_id + PART_SEP))
    parts = groups.get(run_id)
    return merge_parts(run_id, parts) if parts else None


def _scan_groups(dirs: Iterable[Path]) -> tuple[dict[str, list[tuple[Path, RunMeta]]], list[Excluded]]:
    groups: dict[str, list[tuple[Path, RunMeta]]] = defaultdict(list)
    excluded = []
    for d in dirs:
        try:
            meta = load_meta(d)
        except ResultsError as exc:
            excluded.append(Excluded(d.name, str(d), str(exc)))
            continue
        groups[meta.run_id].append((d, meta))
    return groups, excluded


def _named_groups(paths: Sequence[Path]) -> dict[str, list[tuple[Path, RunMeta]]]:
    groups: dict[str, list[tuple[Path, RunMeta]]] = {}
    for path in paths:
        if not path.is_dir():
            raise ResultsError(f"{path}: not a directory" if path.exists() else f"{path}: no such run directory")
        meta = load_meta(path)  # not a run / newer schema: one-line error
        rid = meta.run_id
        if rid in groups:
            continue
        dirs = [path]
        if meta.part:  # the other hosts' parts, copied beside this one
            dirs += sorted(p for p in path.parent.iterdir() if p != path and p.name.startswith(rid + PART_SEP)
                           and (p / RUN_FILE).is_file())
        found, bad = _scan_groups(dirs)
        groups[rid] = found.get(rid, [])
        if bad:
            raise ResultsError(f"{bad[0].path}: part of run {rid} is unreadable: {bad[0].reason}")
    return groups


def merge_parts(run_id: str, parts: list[tuple[Path, RunMeta]]) -> LoadedRun:
    """Load each part of a run and merge them onto the wall clock; problems become ``problems``. With the
    analysis cache on (``runcache.enabled``), a run whose cached figures are valid is not read at all."""
    parts = sorted(parts, key=lambda p: p[0].name)
    paths = tuple(p for p, _ in parts)
    if not runcache.active():
        return _merge(run_id, parts)
    before = runcache.key(paths)
    hit = runcache.read(paths, before)
    if hit is not None and (hit.row is not None or hit.problems):  # no row and no problem: never analysed
        meta = _merged_meta([m for _, m in parts], any(_clock_offset(m) is not None for _, m in parts)) \
            if hit.merged else parts[0][1]
        empty = RunRecord(paths[0], meta, *(pd.DataFrame() for _ in range(4)))
        return LoadedRun(run_id, paths, empty, no_trace=hit.no_trace, problems=hit.problems,
                         warnings=hit.warnings, cached=hit)
    run = _merge(run_id, parts)
    if run.problems:  # never analysed: what select needs to leave it out is all there is to keep
        runcache.write(paths, before, run.status, runcache.Cached(
            run.problems, run.warnings, run.no_trace, merged=run.meta is not parts[0][1]))
    return replace(run, inputs=before)


def _merge(run_id: str, parts: list[tuple[Path, RunMeta]]) -> LoadedRun:
    paths = tuple(p for p, _ in parts)
    duplicate = _duplicate_problem(parts)
    records = []
    for path, _ in parts:
        try:
            records.append(_checked(RunRecord.load(path, samples=False)))
        except ResultsError as exc:
            empty = RunRecord(path, parts[0][1], *(pd.DataFrame() for _ in range(4)))
            return LoadedRun(run_id, paths, empty, problems=(str(exc),))
    offsets = [_clock_offset(r.run) for r in records]
    problems = [duplicate] if duplicate else []
    if len(records) > 1 and any(o is None for o in offsets):
        names = ", ".join(r.path.name for r, o in zip(records, offsets) if o is None)
        problems.append(f"cannot line up the parts: {names} has no wall-clock anchor")
    record = _merged_record(records, [o or 0 for o in offsets], any(o is not None for o in offsets))
    cpu = CpuFiles(tuple((r.path / "cpu.parquet", o or 0) for r, o in zip(records, offsets)
                         if (r.path / "cpu.parquet").is_file()))
    try:
        sampled = cpu.check()
    except ResultsError as exc:
        return LoadedRun(run_id, paths, record, problems=(str(exc),))
    tables = [load_traces(r.path, r.run) for r in records]
    trace, ops, warnings = _trace_frames(records, tables)
    problems += completeness_problems(record, records)
    trace, more = _usable_trace(trace, record)
    why = tracetables.why_no_trace([r.run for r in records], tables, trace, more)
    return LoadedRun(run_id, paths, record, trace, ops, why, tuple(problems),
                     tuple(warnings + more + _cpu_gaps(record, sampled)), cpu_files=cpu)


def _cpu_gaps(record: RunRecord, sampled: set[int]) -> list[str]:
    """Workers with steps (a run without steps: every worker) but no CPU sample (``sampled``: the workers
    that have one): the run's CPU figures are then left out (see analyze)."""
    if not sampled:
        return []
    if record.run.launch.get("recorded") is False:
        expected = {w.index for w in record.run.workers}
    elif record.steps.empty:
        return []
    else:
        expected = set(record.steps["worker"].unique())
    missing = expected - sampled
    return [(f"no CPU samples of worker(s) {_list(int(w) for w in missing)}: CPU cost and per-host CPU are left "
             f"out")] if missing else []


def _duplicate_problem(parts: list[tuple[Path, RunMeta]]) -> str | None:
    names = [m.part.get("name") for _, m in parts]
    if len(parts) > 1 and (None in names or len(set(names)) < len(names)):
        return "several copies of this run: " + ", ".join(str(p) for p, _ in parts)
    return None


def _checked(record: RunRecord) -> RunRecord:
    """Numeric columns must be numeric; each epoch keeps only its final attempt."""
    for name, cols in _NUMERIC.items():
        df = getattr(record, name)
        for col in cols:
            if col in df.columns and not is_numeric_dtype(df[col]):
                raise ResultsError(f"{record.path}: {name} column {col} is not numeric")
    steps = final_attempt(record.steps)
    epochs = final_attempt(record.epochs)
    return RunRecord(record.path, record.run, steps, epochs, record.cpu, record.system)


def _clock_offset(meta: RunMeta) -> int | None:
    """wall - monotonic for this part's machine: the median over its workers' anchors, else its launcher's."""
    offs = sorted(w.clock_offset_ns for w in meta.workers if w.clock_offset_ns is not None)
    if offs:
        return offs[len(offs) // 2]
    launcher = meta.clock_anchor  # a part whose processes recorded nothing: its launcher's anchor
    wall, mono = launcher.get("wall_ns"), launcher.get("mono_ns")
    return int(wall) - int(mono) if isinstance(wall, int) and isinstance(mono, int) else None


def _shift(df: pd.DataFrame, cols: tuple[str, ...], offset: int) -> pd.DataFrame:
    if df.empty or not offset:
        return df
    return df.assign(**{c: df[c].astype("int64") + offset for c in cols if c in df.columns})


def _merged_record(records: list[RunRecord], offsets: list[int], wall: bool) -> RunRecord:
    def cat(name: str, cols: tuple[str, ...]) -> pd.DataFrame:
        frames = [_shift(getattr(r, name), cols, o) for r, o in zip(records, offsets)]
        frames = [f for f in frames if not f.empty]
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else (frames[0] if frames else
                                                                             getattr(records[0], name))

    steps = cat("steps", ("t_start_ns", "t_end_ns"))
    if len(records) > 1 and not steps.empty:
        steps = steps.sort_values(["worker", "epoch", "step"], kind="stable", ignore_index=True)
    meta = _merged_meta([r.run for r in records], wall)
    # the samples stay on disk (``LoadedRun.cpu_files``): the parts' empty tables
    return RunRecord(records[0].path, meta, steps, cat("epochs", ("t_start_ns", "t_end_ns")), records[0].cpu,
                     records[0].system)


_SEVERITY = {"complete": 0, "running": 1, "interrupted": 2, "failed": 3}


def _merged_meta(metas: list[RunMeta], wall: bool) -> RunMeta:
    workers = {w.index: w for m in metas for w in m.workers}
    if wall:  # every time column is on the wall clock now: each anchor maps it to itself
        workers = {i: replace(w, anchor_mono_ns=w.anchor_wall_ns) if w.anchor_wall_ns else w
                   for i, w in workers.items()}
    # The run's config, strategy and plan are those of a part that recorded training: under a parameter-server
    # script the chief's part alone does (its servers' parts record nothing).
    lead = next((m for m in metas if m.launch.get("recorded")), metas[0])
    merged = replace(lead, workers=tuple(workers[i] for i in sorted(workers)),
                     clock="wall" if wall else "monotonic",
                     parts=tuple(str(m.part.get("name")) for m in metas if m.part))
    if len(metas) == 1:
        return merged
    worst = max(metas, key=lambda m: _SEVERITY.get(m.status, 4))
    starts = [m.command_started_wall_ns for m in metas if m.command_started_wall_ns]
    started, ended = _span(metas)
    return replace(merged, status=worst.status, started=started or merged.started, ended=ended,
                   error="; ".join(f"{m.part.get('name')}: {m.error}" for m in metas if m.error) or None,
                   command_started_wall_ns=min(starts) if starts else None,
                   profile=_merged_profile([m.profile for m in metas]))


def _span(metas: list[RunMeta]) -> tuple[str | None, str | None]:
    """The parts' earliest start and latest end (None while a part has not ended): the command's span."""
    starts = sorted((t, m.started) for m in metas if (t := utc_seconds(m.started)) is not None)
    ends = [(utc_seconds(m.ended), m.ended) for m in metas]
    known = [(t, e) for t, e in ends if t is not None]
    return (starts[0][1] if starts else None), (max(known)[1] if known and len(known) == len(ends) else None)


def _merged_profile(profiles: list[dict[str, Any]]) -> dict[str, Any]:
    present = [p for p in profiles if p]
    if not present:
        return {}
    return {**present[0], "workers": {k: v for p in present for k, v in (p.get("workers") or {}).items()}}


def completeness_problems(record: RunRecord, parts: list[RunRecord]) -> list[str]:
    """Why a run cannot be analysed as a whole: its status, a missing worker, epoch or file."""
    meta, problems = record.run, []
    if meta.status != "complete":
        problems.append(f"status {meta.status}" + (f": {meta.error}" if meta.error else ""))
    expected = set(range(meta.num_workers))
    missing_cpu = [f"{r.path.name}: cpu.parquet missing" for r in parts if not (r.path / "cpu.parquet").is_file()]
    if meta.launch.get("recorded") is False:  # no steps: only the whole command's figures (analysis/command.py)
        return problems + missing_cpu
    # Under ParameterServerStrategy the chief records the epochs; its workers' steps are timed on them.
    chief = meta.chief_index if meta.mode == "ps" else None
    for name, df in (("steps", record.steps), ("epochs", record.epochs)):
        have = {int(w) for w in df["worker"].unique()} if not df.empty else set()
        if name == "epochs" and chief is not None:
            if chief not in have:
                problems.append(f"no epochs recorded by the chief (task {chief})")
            continue
        if expected - have:
            missing = expected - have
            problems.append(f"no {name} recorded for worker(s) {_list(missing)}{_part_hint(meta, missing)}")
    return problems + _epoch_problems(record, {chief} if chief is not None else expected) + missing_cpu


def _epoch_problems(record: RunRecord, workers: set[int]) -> list[str]:
    want = record.run.config.get("epochs")
    if record.epochs.empty or not isinstance(want, int):
        return []
    counts = record.epochs.groupby("worker")["epoch"].nunique()
    short = {int(w): int(c) for w, c in counts.items() if int(w) in workers and c < want}
    stepped = record.steps.groupby("worker")["epoch"].nunique() if not record.steps.empty else counts * 0
    no_steps = {int(w) for w, c in stepped.items() if int(w) in workers and c < counts.get(w, 0)}
    out = [f"worker {w} recorded {c} of {want} epochs" for w, c in sorted(short.items())]
    return out + [f"worker {w} has epochs without steps" for w in sorted(no_steps)]


def _list(ws: Iterable[int]) -> str:
    return ", ".join(str(w) for w in sorted(ws))


def _part_hint(meta: RunMeta, missing: set[int]) -> str:
    if not meta.parts:
        return ""
    hosts = meta.cluster.host_of()
    rid = meta.run_id
    names = ", ".join(f"{rid}{PART_SEP}{h}" for h in sorted({str(hosts.get(w)) for w in missing}))
    return f" (part {names} not found beside the others)"


def _trace_frames(records: list[RunRecord],
                  tables: list[TraceTables]) -> tuple[pd.DataFrame | None, pd.DataFrame | None, list[str]]:
    """Every part's trace steps and ops, and the warnings: failed captures, per-file and cross-check ones."""
    warnings = []
    for r, t in zip(records, tables):
        warnings += [f"worker {k}: trace capture failed: {w.get('error')}" for k, w in profile_workers(r.run).items()
                     if w.get("status") == "failed"]
        warnings += list(t.warnings) + _agreement_warnings(t.checks)
    steps = [t.steps for t in tables if t.steps is not None]
    ops = [t.ops for t in tables if t.ops is not None]
    return _concat(steps), _concat(ops), warnings


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame | None:
    """The parts' tables one after the other; one part's as it is (no copy of a million-row trace)."""
    if len(frames) == 1:
        return frames[0].reset_index(drop=True)
    return pd.concat(frames, ignore_index=True) if frames else None


def _agreement_warnings(checks: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    for k, c in sorted(checks.items(), key=lambda kv: int(kv[0])):
        if c.get("within_10pct") is False:
            out.append(f"worker {k}: traced steps (median {c.get('trace_median_step_s')} s) and the step "
                       f"callback (median {c.get('callback_median_step_s')} s) disagree by more than 10%")
    return out


def _usable_trace(trace: pd.DataFrame | None, record: RunRecord) -> tuple[pd.DataFrame | None, list[str]]:
    if trace is None or trace.empty:
        return None, []
    have = {int(w) for w in trace["worker"].unique()}
    want = {int(w) for w in record.steps["worker"].unique()} if not record.steps.empty else have
    if want - have:
        return None, [f"the traces have no steps of worker(s) {_list(want - have)}; trace figures skipped"]
    return trace, []
