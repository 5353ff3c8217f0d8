"""Profiler captures -> trace tables, read at analysis time and cached beside the run.

The trainer only records where each worker's capture landed (``perfkit.profiler.tracewindow.finish_traces``:
run.json -> ``profile``).
``load_traces`` runs in the analysing process (``perfkit analyze``, and the end-of-run summary after the
training processes are gone): it parses every captured ``.xplane.pb`` into ``trace_steps.parquet`` /
``trace_ops.parquet`` and cross-checks each worker's traced steps against its step callback. Parsing in
the trainer would freeze a parser's output into every run; parsing here means a parser fix reaches old
runs. The tables and ``trace_cache.json`` (parser version, each input's size and mtime, the cross-checks)
are a cache: reused only while the parser version and every input match, else parsed again and rewritten
atomically. A run directory that cannot be written still analyses, from the in-memory tables.

A capture that cannot be parsed costs only that worker's trace, with a warning naming the file. Runs made
before this (trace tables written by the trainer, no cache) are parsed again from their captures when the
files are there; with only the old tables left they are used as they are, and columns an older parser did
not write (``collective_total_s``, ``overlap_s``, ``collective_gaps_s``) are NaN: unknown.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
from pandas.api.types import is_numeric_dtype

from perfkit.profiler import xplane
from perfkit.results import TRACE_CACHE_FILE, TRACE_OPS_FILE, TRACE_STEPS_FILE, RunMeta, write_json, write_parquet

log = logging.getLogger(__name__)

_ERROR_CHARS = 120  # a failed capture's error, as the figures' notes quote it
_NOT_FAILED = ("captured", "skipped", "pending")  # capture outcomes that are no failure (no window reached)
AGREEMENT_TOLERANCE = 0.10  # trace vs callback median step time, relative
CACHE_FORMAT = 1  # trace_cache.json's own layout
TRACE_STEP_COLUMNS = ("worker", "epoch", "step", "step_s", "compute_s", "collective_s", "input_s", "other_s")
TRACE_OP_COLUMNS = ("worker", "name", "count", "total_s")
# Columns the parser added in version 2; tables of version 1 lack them (NaN when read: unknown).
V2_COLUMNS = ("collective_total_s", "overlap_s", "collectives", "allreduce_max_s")
# Added in version 3 (the idle gaps of a chain of collectives, advice/); NaN in older tables.
V3_COLUMNS = ("collective_gaps_s",)
LATER_COLUMNS = V2_COLUMNS + V3_COLUMNS  # what a table of an older parser may lack


@dataclass(frozen=True)
class TraceTables:
    """One run directory's traces: every worker that parsed, and what happened to the others."""

    run_dir: Path
    steps: pd.DataFrame | None  # TRACE_STEP_COLUMNS + LATER_COLUMNS (NaN: unknown), or None
    ops: pd.DataFrame | None  # TRACE_OP_COLUMNS, or None
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)  # worker -> cross_check() + "steps"
    unreadable: dict[str, dict[str, str]] = field(default_factory=dict)  # worker -> {"file", "error"}
    notes: tuple[str, ...] = ()  # warnings not about one capture: a damaged table, a cache not written
    source: str = "none"  # "cache", "parsed", "tables" (stored tables as they are) or "none"

    @property
    def warnings(self) -> tuple[str, ...]:
        files = tuple(f"{self.run_dir / u['file']}: {u['error']}; worker {k}'s trace is left out"
                      for k, u in sorted(self.unreadable.items(), key=lambda kv: int(kv[0])))
        return files + self.notes


def profile_workers(meta: RunMeta) -> dict[str, dict[str, Any]]:
    """run.json -> profile -> workers, keeping well-formed entries only."""
    entries = meta.profile.get("workers")
    return {str(k): w for k, w in (entries if isinstance(entries, dict) else {}).items()
            if isinstance(w, dict) and str(k).isdigit()}


def load_traces(run_dir: Path, meta: RunMeta) -> TraceTables:
    """The trace tables of one run directory (a run or one host's part) whose run.json is ``meta``."""
    run_dir = Path(run_dir)
    captured = {k: w for k, w in profile_workers(meta).items() if w.get("status") == "captured"}
    files = [run_dir / w["file"] for w in captured.values() if w.get("file")]
    if not any(p.is_file() for p in files):
        return _stored_tables(run_dir, captured)
    key = _cache_key(run_dir, captured, _hosts(meta))
    cached = _read_cache(run_dir, key)
    if cached is not None:
        return cached
    parsed = _parse_all(run_dir, captured, _hosts(meta))
    if parsed.steps is None and (run_dir / TRACE_STEPS_FILE).is_file():
        # Nothing parsed (no TensorFlow here to read the schema with?): the tables a run was written with.
        stored = _stored_tables(run_dir, captured)
        why = tuple(f"{run_dir / u['file']}: {u['error']}; using {TRACE_STEPS_FILE} as stored"
                    for u in parsed.unreadable.values())
        return replace(stored, notes=why + stored.notes)
    if parsed.steps is None:
        return parsed
    return _store(parsed, key)


def _hosts(meta: RunMeta) -> dict[str, str]:
    hosts = {str(i): h for i, h in meta.cluster.host_of().items()}
    return {**hosts, **{str(w.index): str(w.host or "") for w in meta.workers}}


def _stamp(path: Path) -> dict[str, Any]:
    try:
        st = path.stat()
    except OSError:
        return {"missing": True}
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _cache_key(run_dir: Path, captured: dict[str, dict[str, Any]], hosts: dict[str, str]) -> dict[str, Any]:
    """Everything the cached tables were computed from; JSON-native so a reloaded key compares equal."""
    inputs = {}
    for k, w in sorted(captured.items(), key=lambda kv: int(kv[0])):
        attempt = w.get("attempt")
        inputs[k] = {"file": w.get("file"), "host": hosts.get(k, ""),
                     "attempt": int(attempt) if isinstance(attempt, int) else None,
                     "capture": _stamp(run_dir / w["file"]) if w.get("file") else {"missing": True},
                     "callback": _stamp(_callback_path(run_dir, int(k)))}
    return {"format": CACHE_FORMAT, "parser_version": xplane.PARSER_VERSION, "inputs": inputs}


def _read_cache(run_dir: Path, key: dict[str, Any]) -> TraceTables | None:
    """The cached tables when they were made from exactly ``key``'s inputs, else None (parse again)."""
    try:
        stored = json.loads((run_dir / TRACE_CACHE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("key") != key:
        return None
    tables = stored.get("tables") or {}
    if any(_stamp(run_dir / name) != tables.get(name) for name in (TRACE_STEPS_FILE, TRACE_OPS_FILE)):
        return None  # a table was replaced or lost since the cache was written
    steps, err = read_table(run_dir / TRACE_STEPS_FILE, TRACE_STEP_COLUMNS + LATER_COLUMNS)
    ops, err_ops = read_table(run_dir / TRACE_OPS_FILE, TRACE_OP_COLUMNS)
    if err or err_ops:
        return None
    return TraceTables(run_dir, steps, ops, dict(stored.get("checks") or {}), dict(stored.get("unreadable") or {}),
                       source="cache")


def _parse_all(run_dir: Path, captured: dict[str, dict[str, Any]], hosts: dict[str, str]) -> TraceTables:
    steps, ops, checks, unreadable = [], [], {}, {}
    for k, w in sorted(captured.items(), key=lambda kv: int(kv[0])):
        rel = w.get("file")
        if not rel:
            unreadable[k] = {"file": "run.json", "error": "captured, but no capture file is recorded"}
            continue
        try:
            parsed = xplane.parse(run_dir / rel)
        except xplane.XPlaneError as exc:
            unreadable[k] = {"file": rel, "error": str(exc).removeprefix(f"{run_dir / rel}: ")}
            continue
        worker = int(k)
        mine = parsed.steps.assign(worker=worker, host=hosts.get(k, ""))
        steps.append(mine)
        ops.append(parsed.ops.assign(worker=worker, host=hosts.get(k, "")))
        callback = _callback_steps(run_dir, worker, w.get("attempt"))
        checks[k] = {"steps": int(len(mine)), **cross_check(mine, callback)}
    if not steps:
        return TraceTables(run_dir, None, None, checks, unreadable, source="parsed")
    return TraceTables(run_dir, _order(pd.concat(steps, ignore_index=True)), _order(pd.concat(ops, ignore_index=True)),
                       checks, unreadable, source="parsed")


def _order(df: pd.DataFrame) -> pd.DataFrame:
    first = ["worker", "host"]
    return df[first + [c for c in df.columns if c not in first]]


def _store(parsed: TraceTables, key: dict[str, Any]) -> TraceTables:
    """Write the tables, then the cache record naming them; an unwritable run keeps the in-memory tables."""
    run_dir = parsed.run_dir
    try:
        write_parquet(run_dir / TRACE_STEPS_FILE, parsed.steps)
        write_parquet(run_dir / TRACE_OPS_FILE, parsed.ops)
        tables = {name: _stamp(run_dir / name) for name in (TRACE_STEPS_FILE, TRACE_OPS_FILE)}
        write_json(run_dir / TRACE_CACHE_FILE, {"key": key, "tables": tables, "checks": parsed.checks,
                                                "unreadable": parsed.unreadable})
    except OSError as exc:
        text = (f"{run_dir}: could not cache the parsed traces ({exc.strerror or type(exc).__name__}); "
                f"they are parsed again at every analysis")
        log.warning("%s", text)
        return replace(_projected(parsed), notes=parsed.notes + (text,))
    return _projected(parsed)


def _projected(t: TraceTables) -> TraceTables:
    """The columns a cached table is read with, so parsed and cached tables look the same."""
    if t.steps is None or t.ops is None:
        return t
    return replace(t, steps=t.steps[list(TRACE_STEP_COLUMNS + LATER_COLUMNS)].reset_index(drop=True),
                   ops=t.ops[list(TRACE_OP_COLUMNS)].reset_index(drop=True))


def _stored_tables(run_dir: Path, captured: dict[str, dict[str, Any]]) -> TraceTables:
    """No capture file to parse: the tables on disk as they are, with the cross-checks recorded beside them."""
    path, notes = run_dir / TRACE_STEPS_FILE, []
    steps = ops = None
    if path.is_file():
        steps, err = read_table(path, TRACE_STEP_COLUMNS, optional=LATER_COLUMNS)
        if err:
            notes.append(f"{err}; trace figures skipped")
    elif captured:
        notes.append(f"{path}: missing although run.json says traces were captured (and no capture file is left "
                     f"to parse); trace figures skipped")
    if (run_dir / TRACE_OPS_FILE).is_file():
        ops, err = read_table(run_dir / TRACE_OPS_FILE, TRACE_OP_COLUMNS)
        if err:
            notes.append(err)
    return TraceTables(run_dir, steps, ops, _stored_checks(run_dir, captured), notes=tuple(notes),
                       source="tables" if steps is not None else "none")


def _stored_checks(run_dir: Path, captured: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A cache's cross-checks (its captures since deleted), else those old runs kept in run.json."""
    try:
        stored = json.loads((run_dir / TRACE_CACHE_FILE).read_text(encoding="utf-8"))
        return dict(stored["checks"])
    except (OSError, ValueError, KeyError, TypeError):
        return {k: w for k, w in captured.items() if "matched_steps" in w or "within_10pct" in w}


def read_table(path: Path, columns: tuple[str, ...],
               optional: tuple[str, ...] = ()) -> tuple[pd.DataFrame | None, str | None]:
    """Only ``columns`` (and those of ``optional`` the file has; the others NaN) of a trace table, or why not."""
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        missing = [c for c in columns if c not in names]
        have = [c for c in optional if c in names]
        df = None if missing else pd.read_parquet(path, columns=list(columns) + have)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        return None, f"{path}: unreadable ({exc.__class__.__name__})"
    if df is None:
        return None, f"{path}: missing columns {', '.join(missing)}"
    bad = [c for c in df.columns if c != "name" and not is_numeric_dtype(df[c])]
    if bad:
        return None, f"{path}: column {bad[0]} is not numeric"
    return df.assign(**{c: float("nan") for c in optional if c not in have}), None


def overlap_share(steps: pd.DataFrame) -> pd.Series:
    """Per worker: collective time hidden under compute / all collective time, summed over the steps
    (a ratio of sums, so long steps weigh more); NaN where unknown (an older trace) or no collective ran."""
    if not {"collective_total_s", "overlap_s"} <= set(steps.columns):
        return pd.Series(float("nan"), index=pd.Index(sorted(steps["worker"].unique()), name="worker"))
    g = steps.groupby("worker")
    total = g["collective_total_s"].sum(min_count=1)
    return (g["overlap_s"].sum(min_count=1) / total.where(total > 0)).rename("overlap_share")


def _callback_path(run_dir: Path, worker: int) -> Path:
    return run_dir / "workers" / str(worker) / "steps.parquet"


def _callback_steps(run_dir: Path, worker: int, attempt: int | None) -> pd.DataFrame:
    path = _callback_path(run_dir, worker)
    if not path.is_file():
        return pd.DataFrame(columns=["epoch", "step", "duration_s"])
    df = pd.read_parquet(path)
    if "attempt" in df.columns and not df.empty:  # a restarted cluster: the attempt that was traced
        df = df[df["attempt"] == (attempt if attempt is not None else df["attempt"].max())]
    return df


def cross_check(trace: pd.DataFrame, callback: pd.DataFrame) -> dict[str, Any]:
    """Median step time of the traced steps by the trace and by the step callback, and the overhead of
    tracing: callback step time inside the window vs the steps of the same epochs outside it."""
    key = ["epoch", "step"]
    both = trace[key + ["step_s"]].merge(callback[key + ["duration_s"]], on=key, how="inner")
    out: dict[str, Any] = {"matched_steps": int(len(both))}
    if both.empty:
        out["agreement_note"] = "no traced step is in the step callback's records"
        return out
    t_med, c_med = float(both["step_s"].median()), float(both["duration_s"].median())
    ratio = c_med / t_med if t_med > 0 else float("nan")
    out.update(trace_median_step_s=t_med, callback_median_step_s=c_med, agreement=ratio,
               within_10pct=bool(abs(ratio - 1.0) <= AGREEMENT_TOLERANCE))
    same_epochs = callback[callback["epoch"].isin(both["epoch"].unique())]
    outside = same_epochs.merge(both[key], on=key, how="left", indicator=True)
    outside = outside[outside["_merge"] == "left_only"]
    if not outside.empty:
        o_med = float(outside["duration_s"].median())
        out.update(outside_median_step_s=o_med, overhead_ratio=c_med / o_med if o_med > 0 else float("nan"))
    return out


def why_no_trace(metas: list[RunMeta], tables: list[TraceTables], trace: pd.DataFrame | None,
                 skipped: list[str]) -> str:
    """Why a run has no usable trace: no window at all, captures that did not survive (how many attempts
    failed, and why), or a partial table."""
    if trace is not None:
        return ""
    failed = _failed_attempts(metas, tables)
    lost = sorted({w for w, _, _, final, _ in failed if final})
    if lost:
        names = ", ".join(str(w) for w in lost)
        why = f"no usable trace of worker{'s' if len(lost) > 1 else ''} {names}"
    elif skipped or any(w.get("status") == "captured" for m in metas for w in profile_workers(m).values()):
        why = "trace table missing, damaged or partial"
    else:
        why = "no usable trace" if failed else "no trace window"
    if not failed:
        return why
    # One reason per capture attempt of the run (all its workers together): a worker that finished its
    # capture lost it because a peer crashed, so the peer's crash is the reason.
    reasons: dict[tuple[Any, Any], str] = {}
    def blame(f: tuple[int, str, str, bool, tuple[Any, Any]]) -> tuple[bool, bool]:  # the crashed one first
        return "captured, but" in f[2], f"worker {f[0]} (" not in f[2]

    for worker, status, error, _, key in sorted(failed, key=blame):
        reasons.setdefault(key, f"worker {worker} {status}" + (f" ({_short(error)})" if error else ""))
    n = len(reasons)
    counted: dict[str, int] = {}
    for reason in reasons.values():
        counted[reason] = counted.get(reason, 0) + 1
    return (f"{why}; {n} capture attempt{'s' if n > 1 else ''} failed: "
            + "; ".join(item + (f" (x{c})" if c > 1 else "") for item, c in counted.items()))


def _failed_attempts(metas: list[RunMeta],
                     tables: list[TraceTables]) -> list[tuple[int, str, str, bool, tuple[Any, Any]]]:
    """(worker, status, error, final?, attempt key) of every capture attempt that left no trace: the
    earlier attempts run.json lists under "attempts", then the final one when it failed or could not be
    parsed. The key (launch attempt, window start) tells one attempt of the whole run from another."""
    out = []
    for m, t in zip(metas, tables):
        for k, w in sorted(profile_workers(m).items(), key=lambda kv: int(kv[0])):
            for a in w.get("attempts") or []:
                if isinstance(a, dict) and a.get("status") not in _NOT_FAILED:
                    out.append((int(k), str(a.get("status") or "failed"), str(a.get("error") or ""), False, _key(a)))
            if k in t.unreadable:
                out.append((int(k), "unreadable", f"{t.unreadable[k]['file']}: {t.unreadable[k]['error']}", True,
                            _key(w)))
            elif w.get("status") not in _NOT_FAILED:
                out.append((int(k), str(w.get("status")), str(w.get("error") or ""), True, _key(w)))
    return out


def _key(entry: dict[str, Any]) -> tuple[Any, Any]:
    return entry.get("attempt"), (entry.get("window") or {}).get("first")


def _short(error: str) -> str:
    """The first clause of an error (what went wrong; the rest is what happened next), at most a line."""
    first = error.split("; ")[0].strip()
    return first if len(first) <= _ERROR_CHARS else first[: _ERROR_CHARS - 1] + "…"
