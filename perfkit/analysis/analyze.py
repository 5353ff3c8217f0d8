"""`perfkit analyze`'s entry point: selected runs -> every figure of docs/figures.md as DataFrames.

``analyze(paths, results_dir, baseline_id)`` loads (``load``), picks the baseline and the runs left out
(``select``), computes each run's figures (``summary``, ``cpu``, ``stragglers``, ``command``: the whole
command's wall time, and all a run without steps has) and the baseline-relative ones (speedup, efficiency,
command speedup, CPU cost ratio, validation gap), then the verdict (``verdict``). The result is
an ``Analysis``: frozen, renderer-agnostic; the column names are the JSON keys (see ``renderers.json``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfkit.analysis import cpu as cpu_fig
from perfkit.analysis import runcache
from perfkit.analysis.advice import advice_table
from perfkit.analysis.answer import assumption_lines
from perfkit.analysis.command import NO_STEPS, command_row, exit_codes, stepless, stepless_worker_rows, worker_indices
from perfkit.analysis.cpusamples import CpuSamples, training_window
from perfkit.analysis.goodput import goodput_table, run_goodput
from perfkit.analysis.load import LoadedRun
from perfkit.analysis.modes import mode_table
from perfkit.analysis.overheads import oversubscription, window_cost, window_seconds, worker_cores
from perfkit.analysis.result import Analysis
from perfkit.analysis.select import Selection, describe_data, load_and_select
from perfkit.analysis.startup import startup_phases
from perfkit.analysis.stragglers import StragglerFigures, estimate_split, stragglers, trace_split
from perfkit.analysis.summary import epoch_table, summarize
from perfkit.analysis.timeline import step_timeline
from perfkit.analysis.verdict import verdict
from perfkit.analysis.verify import verification_table
from perfkit.analysis.waterfall import ROW_COLUMNS as WATERFALL_PARTS
from perfkit.analysis.waterfall import checked_terms, ideal_speedup, waterfall_table
from perfkit.analysis.waterfall_parts import run_parts
from perfkit.analysis.whatif import EMPTY_ROW, PLACEMENT_EMPTY, StepModel, equal_workers, placement_row
from perfkit.results import RunMeta, RunRecord


@dataclass(frozen=True)
class _RunFigures:
    row: dict[str, Any]
    epochs: pd.DataFrame
    workers: pd.DataFrame
    processes: pd.DataFrame
    hosts: pd.DataFrame
    placement: pd.DataFrame
    timeline: pd.DataFrame
    ops: pd.DataFrame
    steps_timeline: pd.DataFrame
    advice: pd.DataFrame
    startup: pd.DataFrame
    goodput: pd.DataFrame


def analyze(paths: Sequence[Path] | None, results_dir: Path, baseline_id: str | None = None) -> Analysis:
    """Load the runs (every run under ``results_dir`` when ``paths`` is empty) and compute every figure."""
    return analyze_selection(load_and_select(paths, results_dir, baseline_id))


def analyze_selection(sel: Selection) -> Analysis:

    baseline_id = sel.baseline.run_id if sel.baseline else None
    figures = [_figures(run, run.run_id == baseline_id) for run in sel.runs]
    runs = _relative(pd.DataFrame([f.row for f in figures], columns=RUN_COLUMNS), baseline_id)
    goodput, workers = _cat([f.goodput for f in figures]), _cat([f.workers for f in figures])
    verifications = verification_table({r.run_id: r.meta for r in sel.runs}, runs, workers)
    analysis = Analysis(
        baseline_id=baseline_id, baseline_note=sel.baseline_note, runs=runs,
        epochs=_cat([f.epochs for f in figures]), workers=workers,
        processes=_cat([f.processes for f in figures]), hosts=_cat([f.hosts for f in figures]),
        placement=_cat([f.placement for f in figures]), cpu_timeline=_cat([f.timeline for f in figures]),
        ops=_cat([f.ops for f in figures]), step_timeline=_cat([f.steps_timeline for f in figures]),
        advice=_cat([f.advice for f in figures]), startup=_cat([f.startup for f in figures]),
        waterfall=checked_terms(waterfall_table(runs, baseline_id, goodput), verifications, runs,
                                {r.run_id: r.meta for r in sel.runs}), goodput=goodput,
        excluded=pd.DataFrame([vars(e) for e in sel.excluded], columns=["run_id", "path", "reason"]),
        verifications=verifications, warnings=sel.warnings, verdict=(),
        modes=mode_table(runs, frozenset(r.run_id for r in sel.runs if r.meta.verifies)))
    return Analysis(**{**vars(analysis), "verdict": tuple(verdict(analysis)),
                        "assumptions": tuple(assumption_lines(analysis))})


_TABLES = tuple(f.name for f in fields(_RunFigures) if f.name != "row")


def _figures(run: LoadedRun, is_baseline: bool) -> _RunFigures:
    """``run_figures``, or the analysis cache's when the run was loaded from it (``runcache``); figures
    computed with the cache on are stored for the next analysis."""
    hit = run.cached
    if hit is not None and hit.row is not None:
        return _RunFigures(row={**hit.row, "is_baseline": is_baseline}, **hit.tables)
    out = run_figures(run, is_baseline)
    if run.inputs is not None:
        runcache.write(run.paths, run.inputs, run.status, runcache.Cached(
            run.problems, run.warnings, run.no_trace, out.row, {t: getattr(out, t) for t in _TABLES}))
    return out


def _cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    if len(frames) == 1:  # the same table without a copy (a step timeline can hold millions of rows)
        return frames[0].reset_index(drop=True)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


RUN_COLUMNS = [
    "run_id", "is_baseline", "mode", "strategy", "ps", "step_shares", "min_step_share", "min_share_worker",
    "min_share_vs_even", "workers_died", "steps_lost", "status", "preset", "data", "workers", "hosts", "epochs",
    "steady_epoch_s",
    "steady_is_warmup", "trace_window_s", "trace_window_epoch", "fit_s", "startup_s", "steady_samples_per_s",
    "samples", "steady_epoch_samples", "cpu_s",
    "cpu_s_per_1k_samples", "rss_peak_max_bytes", "command_wall_s", "command_cpu_s", "steps_note", "val_loss",
    "val_accuracy", "val_auc",
    "split_source", "split_note", "steps_compared",
    "straggler_cost", "flagged_workers", "slowest_worker", "slowest_host", "slowest_straggler_share",
    "slowest_speed_score", "others_wait_share", "equal_step_ratio", "equal_epoch_s", "equal_epoch_lo_s",
    "equal_epoch_hi_s", "equal_step_s", "equal_compute_s", "equal_epoch_per_compute", "equal_transfer_s",
    "equal_transfer_source", "equal_val_s", "equal_budgets",
    "equal_assumptions", "placement_hosts",
    "placement_now", "placement_proposed", "compute_now_s", "compute_proposed_s", "placement_epoch_s",
    "placement_epoch_lo_s", "placement_epoch_hi_s", "placement_assumptions", "largest_term", "transfer_share",
    "links", "goodput", *WATERFALL_PARTS,
]
RELATIVE_COLUMNS = ["ideal_speedup", "speedup", "speedup_fit", "efficiency", "efficiency_fit", "command_speedup",
                    "cpu_cost_vs_baseline", "val_accuracy_gap", "val_auc_gap", "val_loss_gap", "equal_speedup",
                    "work_ratio"]


def run_figures(run: LoadedRun, is_baseline: bool = False) -> _RunFigures:
    rec = run.record
    no_steps = stepless(rec.run)  # only the whole command's figures (analysis/command.py)
    cpu = CpuSamples.of(rec, whole_life=no_steps, files=run.cpu_files)
    per_worker_cpu = cpu.per_worker
    epochs = epoch_table(rec)
    summary = summarize(rec, cpu=per_worker_cpu, epochs=epochs)
    asynchronous = run.mode == "ps"  # no worker waits for another: no straggler split, no what-if
    split = None if asynchronous or no_steps else trace_split(run.trace, run.num_workers)
    if split is None and run.num_workers > 1 and not asynchronous and not no_steps:
        split = estimate_split(rec, cpu, run.num_workers, run.no_trace)
    strag = stragglers(split, rec) if split is not None else None
    model = StepModel.of(split, rec, epochs) if strag is not None else None
    window = window_cost(split, rec) if split is not None else None
    # CPU totals of a run whose sampler missed a worker would be partial: left out (the loader warns)
    expected = worker_indices(rec.run) if no_steps else set(rec.steps["worker"].unique())
    sampled = bool(expected) and set(cpu.worker_cpu_s.index) >= expected
    cpu_s = cpu_fig.training_cpu_seconds(cpu) if sampled and not no_steps else math.nan
    samples = float(rec.steps["samples"].sum()) if not rec.steps.empty else math.nan
    goodput = goodput_table(rec, split, window)
    workers = (stepless_worker_rows(rec.run, per_worker_cpu, cpu) if no_steps
               else _worker_rows(run, per_worker_cpu, cpu, strag, summary.fit_s))
    row = {
        "run_id": run.run_id, "is_baseline": is_baseline, "mode": run.mode, "status": run.status,
        "strategy": rec.run.strategy or ("MirroredStrategy" if run.mode == "single" and not no_steps else None),
        "ps": sum(1 for w in rec.run.workers if w.role == "ps"), **_share_row(workers), **_lost_row(rec.run),
        "preset": rec.run.preset, "data": describe_data(rec.run), "workers": run.num_workers,
        "hosts": len(set(cpu_fig.worker_hosts(rec.run).values())) or 1, "epochs": summary.epochs,
        "steady_epoch_s": summary.steady_epoch_s, "steady_is_warmup": summary.steady_is_warmup,
        "trace_window_s": window_seconds(window), "trace_window_epoch": window.epoch + 1 if window else None,
        "fit_s": summary.fit_s, "startup_s": summary.startup_s, "steady_samples_per_s": summary.steady_samples_per_s,
        "samples": samples,
        "steady_epoch_samples": summary.steady_epoch_samples,
        "cpu_s": cpu_s, "cpu_s_per_1k_samples": cpu_s / samples * 1000 if samples else math.nan,
        "rss_peak_max_bytes": float(workers["rss_peak_bytes"].max()) if not workers.empty else math.nan,
        **command_row(rec.run, cpu), **run_goodput(goodput), **_last_metrics(epochs),
        **_straggler_row(strag, rec.run, asynchronous, no_steps),
        **(_what_if_row(model, strag, rec) if strag is not None else EMPTY_ROW | PLACEMENT_EMPTY),
        **run_parts(rec, epochs, split, run.trace, window,
                    oversubscription(split, rec, worker_cores(rec, cpu)) if split is not None else None),
    }
    tag = {"run_id": run.run_id}
    return _RunFigures(
        row=row, epochs=_epoch_rows(rec, epochs).assign(**tag), workers=workers.assign(**tag),
        processes=cpu_fig.process_table(cpu, rec.run).assign(**tag),
        hosts=(cpu_fig.host_table(cpu, rec.run) if sampled else pd.DataFrame()).assign(**tag),
        placement=(strag.placement if strag is not None else pd.DataFrame()).assign(**tag),
        timeline=cpu_fig.cpu_timeline(cpu).assign(**tag), ops=_top_ops(run).assign(**tag),
        steps_timeline=(step_timeline(split, rec, model) if strag is not None and run.num_workers > 1
                        else pd.DataFrame()).assign(**tag),
        advice=(advice_table(split, run.trace, model, row, rec.run, rec, cpu, window)
                if model is not None and split is not None else pd.DataFrame()).assign(**tag),
        startup=startup_phases(rec).assign(**tag), goodput=goodput.assign(**tag))


def _last_metrics(epochs: pd.DataFrame) -> dict[str, float]:
    last = epochs.iloc[-1] if not epochs.empty else {}
    return {m: float(last.get(m, math.nan)) if len(epochs) else math.nan
            for m in ("val_loss", "val_accuracy", "val_auc")}


def _epoch_rows(rec: RunRecord, epochs: pd.DataFrame) -> pd.DataFrame:
    """epoch_table plus where each epoch of worker 0 ends, in seconds since the first step (chart marks)."""
    window = training_window(rec)
    if epochs.empty or window is None:
        return epochs
    ep0 = rec.epochs[rec.epochs["worker"] == rec.epochs["worker"].min()].sort_values("epoch")
    return epochs.assign(end_s=(ep0["t_end_ns"].to_numpy() - window[0]) / 1e9)


def _what_if_row(model: StepModel | None, strag: StragglerFigures, rec: RunRecord) -> dict[str, Any]:
    if model is None:
        return EMPTY_ROW | PLACEMENT_EMPTY
    what = equal_workers(model, cpu_fig.worker_hosts(rec.run), cpu_fig.host_budgets(rec.run))
    moved = not strag.placement.empty and (strag.placement["workers_proposed"] != strag.placement["workers_now"]).any()
    return what.to_row() | (placement_row(model, strag.compute_proposed_s) if moved else PLACEMENT_EMPTY)


def _lost_row(meta: RunMeta) -> dict[str, Any]:
    """ParameterServerStrategy workers that died while the run went on (trainer/lostworkers.py), as "1
    (SIGKILL)", and the steps that failed on them and ran again elsewhere (counted by the chief where perfkit's
    start-up hook watched TensorFlow's coordinator; NaN where nothing counted them)."""
    died = [w for w in meta.workers if w.died]
    text = ", ".join(f"{w.index} ({w.died.get('signal') or 'exit ' + str(w.died.get('exit_code'))})" for w in died)
    counted = [w.plan.extra["coordinator"].get("lost_steps") or {} for w in meta.workers
               if w.plan and isinstance(w.plan.extra.get("coordinator"), dict)]
    lost = float(sum(int(n) for c in counted for n in c.values())) if counted else math.nan
    return {"workers_died": text or None, "steps_lost": lost}


def _share_row(workers: pd.DataFrame) -> dict[str, Any]:
    """Each worker's share of the training steps ("0 38%, 1 62%"), and the smallest share against an even
    one (1/N): under ParameterServerStrategy a slow worker runs fewer steps instead of slowing the others.
    None for a run of one worker, whose share is all the steps by definition."""
    if len(workers) < 2 or "step_share" not in workers:
        return {"step_shares": None, "min_step_share": math.nan, "min_share_worker": math.nan,
                "min_share_vs_even": math.nan}
    low = workers.loc[workers["step_share"].idxmin()]
    return {"step_shares": ", ".join(f"{int(w)} {s:.0%}" for w, s in zip(workers["worker"], workers["step_share"])),
            "min_step_share": float(low["step_share"]), "min_share_worker": int(low["worker"]),
            "min_share_vs_even": float(low["step_share"]) * len(workers)}


def _straggler_row(strag: StragglerFigures | None, meta: RunMeta, asynchronous: bool = False,
                   no_steps: bool = False) -> dict[str, Any]:
    """Split, straggler and placement figures of a run (the equal-workers what-if: analysis/whatif.py)."""
    if no_steps:
        return {"split_source": None, "split_note": NO_STEPS}
    if strag is None and asynchronous:
        return {"split_source": None, "split_note": "asynchronous training (ParameterServerStrategy): no worker "
                "waits for another, so there is no straggler wait and no equal-workers what-if; each worker's "
                "share of the steps shows its speed"}
    if strag is None:
        return {"split_source": None, "split_note": "no split: no usable trace, and one worker or too few CPU "
                "samples to estimate it from"}
    w = strag.workers.set_index("worker")
    slow = w.loc[strag.slowest]
    place = strag.placement
    flagged = [int(i) for i in w.index[w["flagged"]]]
    return {
        "split_source": strag.source, "split_note": strag.note, "steps_compared": strag.steps_compared,
        "straggler_cost": strag.cost, "flagged_workers": " ".join(map(str, flagged)),
        "slowest_worker": strag.slowest, "slowest_host": cpu_fig.worker_hosts(meta).get(strag.slowest),
        "slowest_straggler_share": float(slow["straggler_share"]), "slowest_speed_score": float(slow["speed_score"]),
        "others_wait_share": strag.others_wait_share, "equal_step_ratio": strag.equal_step_ratio,
        "placement_hosts": ":".join(place["host"].astype(str)) if not place.empty else None,
        "placement_now": ":".join(place["workers_now"].astype(str)) if not place.empty else None,
        "placement_proposed": ":".join(place["workers_proposed"].astype(str)) if not place.empty else None,
        "compute_now_s": strag.compute_now_s, "compute_proposed_s": strag.compute_proposed_s,
        **_terms(strag.workers), "links": describe_links(meta),
    }


_TERMS = {"compute": "compute_s", "transfer": "transfer_s", "wait": "wait_s", "input": "input_s"}


def _terms(workers: pd.DataFrame) -> dict[str, Any]:
    """Which term of the workers' mean step is the largest, and transfer's share of the step."""
    means = {name: float(workers[col].mean()) for name, col in _TERMS.items() if col in workers}
    means = {k: v for k, v in means.items() if not math.isnan(v)}
    step = float(workers["step_s"].mean()) if "step_s" in workers else math.nan
    return {"largest_term": max(means, key=means.__getitem__) if means else None,
            "transfer_share": means.get("transfer", math.nan) / step if step and step > 0 else math.nan}


def describe_links(meta: RunMeta) -> str | None:
    """The shaped links as the run recorded them ("tensor101 100 Mbit/s, tensor102 100 Mbit/s + 5 ms")."""
    links = meta.network.get("links") or {}
    out = []
    for host, link in links.items():
        req = link.get("requested") or {}
        parts = [f"{req['bandwidth_mbit']:g} Mbit/s" if req.get("bandwidth_mbit") else "unlimited",
                 f"{req['latency_ms']:g} ms" if req.get("latency_ms") else "",
                 f"{req['loss_pct']:g}% loss" if req.get("loss_pct") else ""]
        out.append(f"{host} " + " + ".join(p for p in parts if p))
    return ", ".join(out) or None


def _worker_rows(run: LoadedRun, per_worker_cpu: pd.DataFrame, cpu: CpuSamples,
                 strag: StragglerFigures | None, fit_s: float = math.nan) -> pd.DataFrame:
    steps = run.record.steps
    if steps.empty:
        return pd.DataFrame()
    out = step_spread(steps)
    out["step_share"] = out["steps"] / out["steps"].sum()
    out["steps_per_s"] = out["steps"] / fit_s if fit_s and fit_s > 0 else math.nan
    hosts = cpu_fig.worker_hosts(run.meta)
    out.insert(1, "host", out["worker"].map(lambda w: hosts.get(int(w))))
    workers_cpu = per_worker_cpu[per_worker_cpu["worker"] >= 0].drop(columns=["host", "samples"])
    out = out.merge(workers_cpu, on="worker", how="left")
    out["cpu_s"] = out["worker"].map(cpu.worker_cpu_s)
    out["cpu_s_per_step"] = out["cpu_s"] / out["steps"]
    out["exit_code"] = out["worker"].map(exit_codes(run.meta))
    if strag is not None:
        out = out.merge(strag.workers.drop(columns=["step_s"]), on="worker", how="left")
        out["split_source"] = strag.source
    return out


def step_spread(steps: pd.DataFrame) -> pd.DataFrame:
    """Per worker: step count and the spread of step time (quartiles, Tukey fences, p95, min, max)."""
    d = steps[["worker", "duration_s"]]
    g = d.groupby("worker")["duration_s"]
    out = g.agg(steps="size", step_mean_s="mean", step_min_s="min", step_max_s="max")
    q = g.quantile([0.25, 0.5, 0.75, 0.95]).unstack()
    out["step_q1_s"], out["step_median_s"], out["step_q3_s"], out["step_p95_s"] = (q[c] for c in q.columns)
    iqr = out["step_q3_s"] - out["step_q1_s"]
    lo, hi = d["worker"].map(out["step_q1_s"] - 1.5 * iqr), d["worker"].map(out["step_q3_s"] + 1.5 * iqr)
    out["step_lo_s"] = d["duration_s"].where(d["duration_s"] >= lo).groupby(d["worker"]).min()
    out["step_hi_s"] = d["duration_s"].where(d["duration_s"] <= hi).groupby(d["worker"]).max()
    return out.reset_index()


def _top_ops(run: LoadedRun, top: int = 10) -> pd.DataFrame:
    ops = run.trace_ops
    if ops is None or ops.empty:
        return pd.DataFrame()
    out = ops.groupby("name", as_index=False).agg(count=("count", "sum"), total_s=("total_s", "sum"))
    return out.sort_values("total_s", ascending=False).head(top).reset_index(drop=True)


def _relative(runs: pd.DataFrame, baseline_id: str | None) -> pd.DataFrame:
    """Speedup, efficiency, CPU cost ratio, validation gap and what-if speedup against the baseline."""
    runs = runs.copy()
    base = runs[runs["run_id"] == baseline_id] if baseline_id else runs.iloc[0:0]
    if base.empty:
        for col in RELATIVE_COLUMNS:
            runs[col] = np.nan
        return runs
    b = base.iloc[0]
    # Speedup is per sample: a script that keeps the per-worker batch (TensorFlow's multi-worker tutorials)
    # trains more samples per epoch with more workers, and its epoch time alone would understate it.
    runs["work_ratio"] = _ratio(runs["steady_epoch_samples"], b["steady_epoch_samples"])
    runs["speedup"] = b["steady_epoch_s"] / runs["steady_epoch_s"] * runs["work_ratio"]
    runs["speedup_fit"] = b["fit_s"] / runs["fit_s"] * _ratio(runs["samples"], b["samples"])
    runs["efficiency"] = runs["speedup"] / runs["workers"]
    runs["efficiency_fit"] = runs["speedup_fit"] / runs["workers"]
    runs["command_speedup"] = b["command_wall_s"] / runs["command_wall_s"]  # any pair: with steps or without
    runs["cpu_cost_vs_baseline"] = runs["cpu_s_per_1k_samples"] / b["cpu_s_per_1k_samples"]
    for m in ("val_accuracy", "val_auc", "val_loss"):
        runs[f"{m}_gap"] = runs[m] - b[m]
    runs["ideal_speedup"] = [ideal_speedup(r, b) for _, r in runs.iterrows()]
    runs["equal_speedup"] = b["steady_epoch_s"] / runs["equal_epoch_s"].astype(float) * runs["work_ratio"]
    return runs


def _ratio(values: pd.Series, base: float) -> pd.Series:
    """Work of each run against the baseline's; 1 where either is unknown (no samples recorded), so the
    speedup is then a ratio of times, as for two runs of one configuration."""
    known = values.where(values > 0) / (base if base and base > 0 else np.nan)
    return known.fillna(1.0)
