"""After a run: every worker's capture -> ``trace_steps.parquet`` and ``trace_ops.parquet``, checked
against the step callback, with the outcome recorded under ``profile`` in run.json.

A capture that cannot be parsed is reported (with the file) and skipped; it never fails the run, whose
training records are already on disk by the time this runs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

from perfkit.profiler import xplane
from perfkit.results import TRACE_OPS_FILE, TRACE_STEPS_FILE, write_parquet

log = logging.getLogger(__name__)

AGREEMENT_TOLERANCE = 0.10  # trace vs callback median step time, relative


def finish_traces(run: Any, cfg: Any, captures: dict[str, dict[str, Any]]) -> None:
    """Analyse the captures of ``run`` (a RunDir); a failure here is recorded, never raised."""
    try:
        run.update(profile=finalize(run.path, cfg.profile_steps, captures, _hosts(run.meta)))
    except Exception as exc:  # noqa: BLE001 - the training records are already safe on disk
        log.warning("could not analyse the profiler captures: %s", exc)
        run.update(profile={"spec": cfg.profile_steps, "error": f"{type(exc).__name__}: {exc}"})


def _hosts(meta: dict[str, Any]) -> dict[str, str]:
    return {str(w.get("index")): str(w.get("host", "")) for w in meta.get("workers") or []}


def finalize(run_dir: Path, spec: str, captures: dict[str, dict[str, Any]],
             hosts: dict[str, str]) -> dict[str, Any]:
    """Parse each captured worker's xplane, write the trace tables, and return run.json's ``profile``."""
    profile: dict[str, Any] = {"spec": spec, "workers": {}}
    step_frames, op_frames = [], []
    for worker, capture in sorted(captures.items(), key=lambda kv: int(kv[0])):
        entry = dict(capture)
        profile["workers"][worker] = entry
        profile.setdefault("window", capture.get("window"))
        if capture.get("status") != "captured" or not capture.get("file"):
            continue
        try:
            parsed = xplane.parse(run_dir / capture["file"])
        except xplane.XPlaneError as exc:
            log.warning("%s", exc)
            entry.update(status="unreadable", error=str(exc))
            continue
        host, w = hosts.get(worker, ""), int(worker)
        steps = parsed.steps.assign(worker=w, host=host)
        step_frames.append(steps)
        op_frames.append(parsed.ops.assign(worker=w, host=host))
        callback = _callback_steps(run_dir, w, capture.get("attempt"))
        entry.update(steps=int(len(steps)), **cross_check(steps, callback))
    if step_frames:
        write_parquet(run_dir / TRACE_STEPS_FILE, _order(pd.concat(step_frames, ignore_index=True)))
        write_parquet(run_dir / TRACE_OPS_FILE, _order(pd.concat(op_frames, ignore_index=True)))
        profile["tables"] = [TRACE_STEPS_FILE, TRACE_OPS_FILE]
    return profile


def _order(df: pd.DataFrame) -> pd.DataFrame:
    first = ["worker", "host"]
    return df[first + [c for c in df.columns if c not in first]]


def _callback_steps(run_dir: Path, worker: int, attempt: int | None) -> pd.DataFrame:
    path = run_dir / "workers" / str(worker) / "steps.parquet"
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
