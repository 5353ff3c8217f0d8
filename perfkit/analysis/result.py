"""The result of an analysis: every figure as DataFrames, renderer-agnostic. Defined apart from
``analyze`` so that the verdict and the renderers, which read it, do not import the module that calls them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields

import pandas as pd


@dataclass(frozen=True)
class Analysis:
    """Every figure, as tables keyed by run_id. Missing figures are NaN/None, never made up."""

    baseline_id: str | None
    baseline_note: str
    runs: pd.DataFrame  # one row per analysed run (the CSV table)
    epochs: pd.DataFrame  # per run and epoch: times, samples/s, metrics (convergence)
    workers: pd.DataFrame  # per run and worker: steps, step-time spread, CPU, memory, split, stragglers
    processes: pd.DataFrame  # per run and process: CPU% mean/p95, CPU-seconds, peak RSS, threads
    hosts: pd.DataFrame  # per run and host: CPU% mean/p95 and as a share of the host's budget
    placement: pd.DataFrame  # per run and host: capacity share, workers now / proportional / proposed
    cpu_timeline: pd.DataFrame  # per run and process: CPU% against seconds since the first step
    ops: pd.DataFrame  # per run: top traced ops by self time
    step_timeline: pd.DataFrame  # per run: the trace window's steps per worker and as equal workers (timeline.py)
    advice: pd.DataFrame  # per run: causes of lost speed ranked by cost, the change, predicted gain (advice/records.py)
    excluded: pd.DataFrame  # run_id, path, reason
    verifications: pd.DataFrame  # per verification run: the what-if it ran, predicted vs measured
    warnings: tuple[str, ...]
    verdict: tuple[str, ...]
    modes: pd.DataFrame = field(default_factory=pd.DataFrame)  # per mode: its latest run, sync vs async
    assumptions: tuple[str, ...] = ()  # what each what-if assumed, apart from the verdict (answer.py)
    startup: pd.DataFrame = field(default_factory=pd.DataFrame)  # per run, worker and phase (startup.py)
    waterfall: pd.DataFrame = field(default_factory=pd.DataFrame)  # per run and term: ideal to measured (waterfall.py)
    goodput: pd.DataFrame = field(default_factory=pd.DataFrame)  # per run and worker: where its span went (goodput.py)


def fingerprint(a: Analysis) -> str:
    """A digest of every figure of ``a`` (each table's columns, types and values; every text): two analyses
    with the same fingerprint render the same report. The HTML report carries it, so that an unchanged
    analysis need not write its report again (analysis/renderers/html.py)."""
    digest = hashlib.sha256()
    for f in fields(a):
        value = getattr(a, f.name)
        digest.update(f.name.encode())
        if isinstance(value, pd.DataFrame):
            digest.update(json.dumps([list(map(str, value.columns)), list(map(str, value.dtypes))]).encode())
            if not value.empty:  # as JSON: cells may hold lists or records, which pandas' row hashes refuse
                digest.update(value.to_json(orient="values", double_precision=15, default_handler=str).encode())
        else:
            digest.update(json.dumps(value, default=str).encode())
    return digest.hexdigest()
