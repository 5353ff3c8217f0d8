"""The scaling forecast: a step-time model fitted to a sweep's measured points, predicting other counts.

The model (docs/scaling.md), for N workers, x = per-worker batch / the batch of one worker (strong scaling:
1/N; weak: 1) and G the gradient in MB (the model's parameters x 4 bytes):

    step(N)  = compute(N) + transfer(N) + wait(N)
    compute  = c0 + c1 * x                              (the worker's share of the batch; input folded in)
    transfer = beta * 2(N-1)/N * G + lam * (N-1)        (ring all-reduce: bytes each worker sends, and one
                                                         latency per extra worker)
    wait     = omega * sqrt(2 ln N)                     (the slowest of N workers: the expected maximum of
                                                         N equal noisy step times grows as sqrt(2 ln N))
    epoch(N) = steps(N) * step(N) + v0 + v1 * x         (validation shared the same way)

Each term is fitted to its own measured column (the per-step split of each run), least squares, beta, lam
and omega held >= 0. The interval: the predictions of the same model fitted to each round of the sweep on
its own (the repeats' spread), widened by twice the full fit's relative RMS error on the measured epochs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

FORECAST_COLUMNS = ["workers", "measured", "steps", "step_s", "compute_s", "transfer_s", "wait_s",
                    "steady_epoch_s", "epoch_lo_s", "epoch_hi_s", "measured_epoch_s", "error", "speedup",
                    "speedup_lo", "speedup_hi", "efficiency"]
TERM_COLUMNS = ["term", "formula", "value", "unit"]
Z = 2.0  # the residual band: +- this many relative RMS errors


@dataclass(frozen=True)
class StepModel:
    c0: float
    c1: float
    beta: float
    lam: float
    omega: float
    v0: float
    v1: float
    grad_mb: float
    strong: bool

    def x(self, n: int) -> float:
        return 1.0 / n if self.strong else 1.0

    def terms(self, n: int) -> dict[str, float]:
        x = self.x(n)
        return {"compute_s": self.c0 + self.c1 * x,
                "transfer_s": self.beta * 2 * (n - 1) / n * self.grad_mb + self.lam * (n - 1),
                "wait_s": self.omega * math.sqrt(2 * math.log(n)) if n > 1 else 0.0}

    def epoch(self, n: int, steps: float) -> float:
        return steps * sum(self.terms(n).values()) + self.v0 + self.v1 * self.x(n)


def lstsq(a: np.ndarray, y: np.ndarray, nonneg: Sequence[int] = ()) -> np.ndarray:
    """Least squares, the columns in ``nonneg`` held >= 0 (every subset of free columns tried: the model has
    at most two, so this is exact and small)."""
    n = a.shape[1]
    best, best_sse = np.zeros(n), math.inf
    for mask in range(1 << n):
        cols = [j for j in range(n) if mask >> j & 1]
        coef = np.zeros(n)
        if cols:
            coef[cols] = np.linalg.lstsq(a[:, cols], y, rcond=None)[0]
        if any(coef[j] < 0 for j in nonneg):
            continue
        sse = float(np.sum((a @ coef - y) ** 2))
        if sse < best_sse - 1e-15:
            best, best_sse = coef, sse
    return best


def fit(points: pd.DataFrame, grad_mb: float, strong: bool) -> StepModel | None:
    """The model fitted to the runs in ``points`` (RUN_COLUMNS rows of worker counts); None when they hold
    fewer than two counts with a compute term."""
    p = points[np.isfinite(points["compute_s"].astype(float))]
    if p["workers"].nunique() < 2:
        return None
    n = p["workers"].astype(float).to_numpy()
    x = 1 / n if strong else np.ones_like(n)
    one = np.ones_like(n)
    # Every term >= 0: compute shrinks with the worker's share of the batch (the model), and a machine whose
    # steps slow down with more workers shows as the fit's error, not as a negative cost per sample.
    c0, c1 = lstsq(np.column_stack([one, x]), p["compute_s"].astype(float).to_numpy(), nonneg=(0, 1))
    t = p[np.isfinite(p["transfer_s"].astype(float))]
    nt = t["workers"].astype(float).to_numpy()
    beta, lam = lstsq(np.column_stack([2 * (nt - 1) / nt * grad_mb, nt - 1]), t["transfer_s"].astype(float).to_numpy(),
                      nonneg=(0, 1)) if len(t) else (0.0, 0.0)
    w = p[np.isfinite(p["wait_s"].astype(float))]
    nw = w["workers"].astype(float).to_numpy()
    (omega,) = lstsq(np.sqrt(2 * np.log(nw))[:, None], w["wait_s"].astype(float).to_numpy(), nonneg=(0,)) \
        if len(w) else (0.0,)
    v = p[np.isfinite(p["val_s"].astype(float))]
    nv = v["workers"].astype(float).to_numpy()
    v0, v1 = lstsq(np.column_stack([np.ones_like(nv), 1 / nv if strong else np.ones_like(nv)]),
                   v["val_s"].astype(float).to_numpy(), nonneg=(0, 1)) if len(v) else (0.0, 0.0)
    return StepModel(*(float(c) for c in (c0, c1, beta, lam, omega, v0, v1)), grad_mb=grad_mb, strong=strong)


def forecast(runs: pd.DataFrame, record: Any, targets: Sequence[int]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """FORECAST_COLUMNS for ``targets``, TERM_COLUMNS of the fitted model, and notes."""
    points = workers_way(runs)
    strong = record.scaling == "strong"
    grad_mb = (record.gradient_bytes or 0) / 1e6
    notes = [] if grad_mb > 0 else ["gradient size unknown (no run recorded the model's parameters): the "
                                    "all-reduce bandwidth term is per 1 MB"]
    model = fit(points, grad_mb or 1.0, strong) if not points.empty else None
    if model is None:
        return (pd.DataFrame(columns=FORECAST_COLUMNS), pd.DataFrame(columns=TERM_COLUMNS),
                notes + ["no forecast: it needs complete runs of at least two worker counts"])
    if points["workers"].nunique() < 3:
        notes.append("forecast from two worker counts: each term's fit has no spare point, so its interval holds "
                     "only the repeats' spread and the fit's error; run three or more counts to test the model")
    per_round = [m for _, g in points.groupby("round") for m in [fit(g, grad_mb or 1.0, strong)] if m is not None]
    rms = _relative_rms(model, points)
    ref_rate = _reference_rate(runs)
    rows = [_row(model, per_round, rms, points, n, record, ref_rate) for n in targets]
    return pd.DataFrame(rows, columns=FORECAST_COLUMNS), term_table(model, rms, len(per_round)), notes


def workers_way(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of the workers way (a row with no way: a sweep recorded before --ways): the model's ring
    all-reduce among worker processes is theirs; replicas in one process and ps are not modelled."""
    if runs.empty:
        return runs
    way = runs["way"] if "way" in runs else pd.Series("workers", index=runs.index)
    return runs[(runs["role"] == "workers") & (way.isna() | (way == "workers"))]


def _steps(points: pd.DataFrame, record: Any, n: int) -> float:
    """A measured count's steps per epoch; otherwise the training samples over its global batch."""
    same = points[points["workers"] == n]["steps"].astype(float)
    if len(same) and same.notna().all():
        return float(same.mean())
    samples = float((points["steps"].astype(float) * points["global_batch"].astype(float)).max())
    batch = record.batch_size if record.scaling == "strong" else record.batch_size * n
    return float(math.floor(samples / batch)) if samples > 0 else math.nan


def _row(model: StepModel, per_round: list[StepModel], rms: float, points: pd.DataFrame, n: int, record: Any,
         ref_rate: float) -> dict[str, Any]:
    steps = _steps(points, record, n)
    epoch = model.epoch(n, steps)
    each = [m.epoch(n, steps) for m in per_round] + [epoch * (1 - Z * rms), epoch * (1 + Z * rms)]
    lo, hi = min(each), max(each)
    measured = points[points["workers"] == n]["steady_epoch_s"].astype(float)
    m_epoch = float(measured.mean()) if len(measured) else math.nan
    batch = record.batch_size if record.scaling == "strong" else record.batch_size * n
    speed = (lambda e: steps * batch / e / ref_rate if e > 0 else math.nan)  # noqa: E731 - per sample
    terms = model.terms(n)
    return {"workers": n, "measured": bool(len(measured)), "steps": steps, "step_s": sum(terms.values()), **terms,
            "steady_epoch_s": epoch, "epoch_lo_s": lo, "epoch_hi_s": hi, "measured_epoch_s": m_epoch,
            "error": m_epoch / epoch - 1 if len(measured) and epoch > 0 else math.nan, "speedup": speed(epoch),
            "speedup_lo": speed(hi), "speedup_hi": speed(lo), "efficiency": speed(epoch) / n}


def _relative_rms(model: StepModel, points: pd.DataFrame) -> float:
    errs = [(model.epoch(int(r.workers), float(r.steps)) - float(r.steady_epoch_s)) / float(r.steady_epoch_s)
            for r in points.itertuples() if float(r.steady_epoch_s) > 0 and r.steps == r.steps]
    return float(math.sqrt(np.mean(np.square(errs)))) if errs else math.nan


def _reference_rate(runs: pd.DataFrame) -> float:
    known = runs[np.isfinite(runs["speedup"].astype(float)) & (runs["speedup"].astype(float) > 0)]
    return float((known["rate"] / known["speedup"]).mean()) if len(known) else math.nan


def term_table(model: StepModel, rms: float, rounds: int) -> pd.DataFrame:
    """The fitted model, one row per term, in the units a reader can check against a run's split."""
    bw = 1 / model.beta if model.beta > 0 else math.inf
    x = "1/N" if model.strong else "1"
    rows = [
        ("compute, fixed per step", "c0", model.c0, "s"),
        (f"compute of the worker's share of the batch (x = {x})", "c1 * x", model.c1, "s"),
        ("gradient all-reduced each step", "G", model.grad_mb, "MB"),
        ("all-reduce bandwidth (effective)", "beta * 2(N-1)/N * G, beta = 1/bandwidth", bw, "MB/s"),
        ("all-reduce latency per extra worker", "lam * (N-1)", model.lam, "s"),
        ("wait for the slowest worker", "omega * sqrt(2 ln N)", model.omega, "s"),
        ("validation, fixed per epoch", "v0", model.v0, "s"),
        (f"validation of the worker's share (x = {x})", "v1 * x", model.v1, "s"),
        ("fit: relative RMS error on the measured epochs", "rms", rms, "share"),
        ("rounds fitted on their own (the interval's spread)", "rounds", float(rounds), "count"),
    ]
    return pd.DataFrame([{"term": t, "formula": f, "value": v, "unit": u} for t, f, v, u in rows],
                        columns=TERM_COLUMNS)
