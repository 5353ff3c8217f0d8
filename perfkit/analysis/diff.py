"""`perfkit diff A B`: two runs, or two sets of repeated runs, side by side, each difference marked
significant or within noise (docs/diff.md).

Both sides are analysed together with A's first run as the baseline (``analyze.analyze_selection``), so B
gets its speedup, waterfall and goodput against A. Then, per figure (``FIGURES``: throughput, step split,
straggler, CPU per 1,000 samples, goodput), A's and B's values (means over each side's runs) and B's
change. When either side has repeats, a figure's noise band is the 95% t-interval of the change from the
run-to-run spread (the sides' variances pooled: each side is one configuration run again, so one side's
repeats measure the other's drift too; a single new run against three of the baseline is CI's usual case).
With one run a side, throughput gets a per-step bootstrap (each side's steady steps resampled,
``BOOTSTRAP`` times: the 95% interval of the ratio of their mean time per sample), which holds step-to-step
noise only and says so, and other figures have no band. Per worker, the traced ops whose time per 1,000 of
that worker's samples grew or shrank most (each side's mean over its traced runs; B's worker against A's
worker of the same index, or A's only worker). Analysers only compute; renderers draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import pandas as pd

from perfkit.analysis.analyze import analyze_selection
from perfkit.analysis.load import LoadedRun
from perfkit.analysis.result import Analysis
from perfkit.analysis.select import Selection, workload
from perfkit.analysis.stats import t_quantile
from perfkit.analysis.stragglers import step_keys
from perfkit.analysis.waterfall_parts import step_means

BOOTSTRAP = 2000
LEVEL = 0.95
TOP_OPS = 10


class Better(str, Enum):
    """Which way a figure improves."""

    HIGHER = "higher"
    LOWER = "lower"


class Call(str, Enum):
    """A difference, judged against the noise band."""

    SIGNIFICANT = "significant"  # outside the t-interval from repeated runs' spread
    BEYOND_STEPS = "beyond per-step noise"  # one run a side: outside the per-step band, which holds no drift
    WITHIN_NOISE = "within noise"
    NO_BAND = "no band"  # one run a side and no per-step resampling of this figure


# figure -> (words, where it is: runs row or workers mean, which way is better)
FIGURES: dict[str, tuple[str, str, Better]] = {
    "steady_samples_per_s": ("throughput (steady samples/s)", "runs", Better.HIGHER),
    "steady_epoch_s": ("steady epoch s", "runs", Better.LOWER),
    "step_mean_s": ("step s (mean over workers)", "workers", Better.LOWER),
    "compute_s": ("compute s per step", "workers", Better.LOWER),
    "transfer_s": ("exposed all-reduce s per step", "workers", Better.LOWER),
    "wait_s": ("wait for the slowest s per step", "workers", Better.LOWER),
    "input_s": ("input s per step", "workers", Better.LOWER),
    "straggler_cost": ("waiting cost (share of step time)", "runs", Better.LOWER),
    "slowest_speed_score": ("slowest worker's speed score", "runs", Better.HIGHER),
    "cpu_s_per_1k_samples": ("CPU-seconds per 1,000 samples", "runs", Better.LOWER),
    "goodput": ("goodput", "runs", Better.HIGHER),
}
FIGURE_COLUMNS = ["figure", "words", "better", "a", "b", "change", "band", "band_basis", "call"]
OP_COLUMNS = ["worker", "a_worker", "op", "a_ms_per_1k", "b_ms_per_1k", "change_ms_per_1k", "call"]


@dataclass(frozen=True)
class Diff:
    a: tuple[str, ...]  # run ids of side A (the first is the baseline of the analysis)
    b: tuple[str, ...]
    analysis: Analysis  # both sides together, A's first run the baseline
    figures: pd.DataFrame  # FIGURE_COLUMNS
    ops: pd.DataFrame  # OP_COLUMNS
    slowdown: float  # B's time per sample over A's, minus 1 (0.1: B is 10% slower)
    slowdown_lo: float  # its noise band's ends (NaN: none)
    slowdown_hi: float
    band_note: str  # how the band was found, in words
    notes: tuple[str, ...]  # what is not comparable, said once


def diff(a: list[LoadedRun], b: list[LoadedRun], seed: int = 0) -> Diff:
    ids_a, ids_b = tuple(r.run_id for r in a), tuple(r.run_id for r in b)
    sel = Selection(tuple(a + b), a[0], "side A of perfkit diff", (), ())
    analysis = analyze_selection(sel)
    values = {side: _side_values(analysis, ids) for side, ids in (("a", ids_a), ("b", ids_b))}
    repeats = len(a) > 1 or len(b) > 1
    if repeats:
        ta, tb = (np.array([_time_per_sample(r) for r in side]) for side in (a, b))
        slow, half, df = _t_band(ta, tb)
        lo, hi = slow - half, slow + half
        note = (f"Student's t from the run-to-run spread of {len(a)} and {len(b)} runs, {df} degrees of "
                "freedom; more repeats narrow it" if df else
                "no band: a side's runs have no speed to spread")
    else:
        slow, lo, hi = _bootstrap(a, b, np.random.default_rng(seed))
        note = ("a per-step bootstrap of one run a side: it holds step-to-step noise only, not the drift "
                "between runs of one configuration, so a change beyond it may still be noise; repeat a side "
                "(A1,A2,A3 B) for a band from the runs")
    figures = _figures(values, (lo, hi), repeats)
    ops = _ops(a, b, abs(hi - lo) / 2 if math.isfinite(hi - lo) else math.nan, repeats)
    return Diff(ids_a, ids_b, analysis, figures, ops, slow, lo, hi, note, tuple(_notes(a, b)))


def _side_values(a: Analysis, ids: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Per figure, its value in each of the side's runs (NaN where a run lacks it)."""
    runs = a.runs[a.runs["run_id"].isin(ids)].set_index("run_id")
    w = a.workers[a.workers["run_id"].isin(ids)] if not a.workers.empty else a.workers
    out = {}
    for fig, (_, where, _) in FIGURES.items():
        if where == "runs":
            per_run = pd.to_numeric(runs[fig], errors="coerce") if fig in runs else pd.Series(dtype=float)
        else:
            per_run = w.groupby("run_id")[fig].mean() if fig in w else pd.Series(dtype=float)
        out[fig] = per_run.reindex(list(ids)).to_numpy(float)
    return out


def _t_band(a: np.ndarray, b: np.ndarray) -> tuple[float, float, int]:
    """B's change over A (relative to A's mean), the half-width of its ``LEVEL`` t-interval and its degrees
    of freedom (0: no band). The variance is pooled over the sides that have repeats: both run one
    configuration, so a side run once borrows the other's."""
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if not len(a) or not len(b) or not a.mean():
        return math.nan, math.nan, 0
    change = float(b.mean() / a.mean() - 1)
    df = max(0, len(a) - 1) + max(0, len(b) - 1)
    if df == 0:
        return change, math.nan, 0
    pooled = (((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / df
    half = t_quantile(LEVEL, df) * math.sqrt(pooled * (1 / len(a) + 1 / len(b))) / abs(a.mean())
    return change, float(half), df


def _figures(values: dict[str, dict[str, np.ndarray]], slow_band: tuple[float, float],
             repeats: bool) -> pd.DataFrame:
    rows = []
    for fig, (words, _, better) in FIGURES.items():
        va, vb = values["a"][fig], values["b"][fig]
        a, b = (float(np.nanmean(v)) if np.isfinite(v).any() else math.nan for v in (va, vb))
        change, band = _t_band(va, vb)[:2] if repeats else (b / a - 1 if a else math.nan, math.nan)
        basis = f"the runs' spread ({LEVEL:.0%} t)"
        if fig == "steady_samples_per_s" and math.isfinite(slow_band[0]):
            # throughput is the inverse of time per sample: its band from the slowdown's
            lo, hi = 1 / (1 + slow_band[1]) - 1, 1 / (1 + slow_band[0]) - 1
            band, basis = (hi - lo) / 2, "the slowdown's band"
            call = _call(change, (lo, hi), repeats)
        elif math.isfinite(band):
            call = _call(change, (change - band, change + band), repeats)
        else:
            band, basis, call = math.nan, "", Call.NO_BAND
        rows.append({"figure": fig, "words": words, "better": better.value, "a": a, "b": b, "change": change,
                     "band": band, "band_basis": basis, "call": call.value})
    return pd.DataFrame(rows, columns=FIGURE_COLUMNS)


def _call(change: float, interval: tuple[float, float], repeats: bool) -> Call:
    """Outside the band: significant with repeats on a side; with one run a side only beyond the
    per-step noise (run-to-run drift is not in its band: benchmarks/measurements, "perfkit diff")."""
    if not math.isfinite(change):
        return Call.NO_BAND
    lo, hi = interval
    if lo <= 0 <= hi:
        return Call.WITHIN_NOISE
    return Call.SIGNIFICANT if repeats else Call.BEYOND_STEPS


def _time_per_sample(run: LoadedRun) -> float:
    """The steady epochs' mean step time per sample (each step's mean over its workers)."""
    per = _steady_step_rates(run)
    return float(per.mean()) if len(per) else math.nan


def _steady_step_rates(run: LoadedRun) -> np.ndarray:
    """Per steady step (epochs after the first): its mean duration over the workers / its global samples."""
    steps = run.record.steps
    if steps.empty or "samples" not in steps:
        return np.array([])
    if steps["epoch"].nunique() > 1:
        steps = steps[steps["epoch"] > steps["epoch"].min()]
    duration, samples = step_means(steps)
    keep = samples > 0
    return duration[keep] / samples[keep]


def _bootstrap(a: list[LoadedRun], b: list[LoadedRun], rng: np.random.Generator) -> tuple[float, float, float]:
    """B's slowdown over A from one run a side, and its 95% interval from resampled steady steps."""
    ra, rb = _steady_step_rates(a[0]), _steady_step_rates(b[0])
    if len(ra) < 2 or len(rb) < 2:
        return math.nan, math.nan, math.nan
    slow = float(rb.mean() / ra.mean() - 1)
    ma = rng.choice(ra, (BOOTSTRAP, len(ra))).mean(axis=1)
    mb = rng.choice(rb, (BOOTSTRAP, len(rb))).mean(axis=1)
    lo, hi = np.percentile(mb / ma - 1, [2.5, 97.5])
    return slow, float(lo), float(hi)


def _ops(a: list[LoadedRun], b: list[LoadedRun], band: float, repeats: bool) -> pd.DataFrame:
    """Per worker of B, the traced ops whose time per 1,000 of its samples moved most against A (each side's
    mean over its traced runs; ``band``: the slowdown's half-width, as a share of A's time per sample)."""
    ref, run = _side_op_rates(a), _side_op_rates(b)
    if ref.empty or run.empty:
        return pd.DataFrame(columns=OP_COLUMNS)
    single = ref["worker"].nunique() == 1
    ref_worker = run["worker"].map(lambda w: int(ref["worker"].iloc[0]) if single else int(w))
    merged = run.assign(a_worker=ref_worker).merge(
        ref.rename(columns={"worker": "a_worker", "ms_per_1k": "a_ms_per_1k"})[["a_worker", "op", "a_ms_per_1k"]],
        on=["a_worker", "op"], how="outer")
    merged["worker"] = merged["worker"].fillna(merged["a_worker"]).astype(int)
    merged = merged.rename(columns={"ms_per_1k": "b_ms_per_1k"}).fillna({"a_ms_per_1k": 0.0, "b_ms_per_1k": 0.0})
    merged["change_ms_per_1k"] = merged["b_ms_per_1k"] - merged["a_ms_per_1k"]
    per_sample = float(np.nanmean([_time_per_sample(r) for r in a]))
    noise_ms = band * per_sample * 1e6 if math.isfinite(band) else math.nan
    merged["call"] = [Call.NO_BAND.value if not math.isfinite(noise_ms) else
                      _call(c, (c - noise_ms, c + noise_ms), repeats).value for c in merged["change_ms_per_1k"]]
    top = merged.reindex(merged["change_ms_per_1k"].abs().sort_values(ascending=False).index).head(TOP_OPS)
    return top[OP_COLUMNS].reset_index(drop=True)


def _side_op_rates(runs: list[LoadedRun]) -> pd.DataFrame:
    """Per worker and op, the mean over the side's traced runs of its ms per 1,000 samples (an op a traced
    run did not run counts 0 there)."""
    rates = [r for r in (_op_rates(run) for run in runs) if not r.empty]
    if len(rates) < 2:
        return rates[0] if rates else pd.DataFrame(columns=["worker", "op", "ms_per_1k"])
    total = pd.concat(rates, ignore_index=True).groupby(["worker", "op"], as_index=False)["ms_per_1k"].sum()
    return total.assign(ms_per_1k=total["ms_per_1k"] / len(rates))


def _op_rates(run: LoadedRun) -> pd.DataFrame:
    """Per worker and op: milliseconds of self time per 1,000 of that worker's samples in its traced steps."""
    ops, trace, steps = run.trace_ops, run.trace, run.record.steps
    if ops is None or ops.empty or trace is None or trace.empty or steps.empty or "samples" not in steps:
        return pd.DataFrame(columns=["worker", "op", "ms_per_1k"])
    width = int(max(trace["step"].max(), steps["step"].max())) + 1
    out = []
    for w, own in ops.groupby("worker"):
        mine = steps[steps["worker"] == w]
        keys = pd.unique(step_keys(trace[trace["worker"] == w], width))
        samples = float(mine["samples"].to_numpy(float)[np.isin(step_keys(mine, width), keys)].sum())
        if samples > 0:
            out.append(pd.DataFrame({"worker": int(w), "op": own["name"].astype(str).to_numpy(),
                                     "ms_per_1k": own["total_s"].to_numpy(float) / samples * 1e6}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["worker", "op", "ms_per_1k"])


def _notes(a: list[LoadedRun], b: list[LoadedRun]) -> list[str]:
    """What differs between the sides beyond the change compared, said once."""
    notes = []
    ra, rb = a[0].meta, b[0].meta
    if workload(ra) != workload(rb):
        notes.append("the sides ran different workloads or data: compared per sample only")
    if ra.config.get("batch_size") != rb.config.get("batch_size"):
        notes.append(f"global batch {ra.config.get('batch_size')} against {rb.config.get('batch_size')}: "
                     "compared per sample")
    if a[0].num_workers != b[0].num_workers:
        notes.append(f"{a[0].num_workers} against {b[0].num_workers} workers: per-step figures are each side's "
                     "mean over its workers; ops per 1,000 of each worker's samples")
    for side, runs in (("A", a), ("B", b)):
        untraced = [r.run_id for r in runs if r.trace is None]
        if untraced:
            notes.append(f"side {side} has no trace ({', '.join(untraced)}): its ops are left out")
    return notes


def summary_row(d: Diff) -> dict[str, Any]:
    return {"a": list(d.a), "b": list(d.b), "slowdown": d.slowdown, "slowdown_lo": d.slowdown_lo,
            "slowdown_hi": d.slowdown_hi, "band": d.band_note, "notes": list(d.notes)}
