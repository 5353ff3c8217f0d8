"""The scaling forecast: the step-time model (``model``) fitted to a sweep's measured points, the
epoch it predicts at other counts, and how sure it can be (docs/scaling.md, "The forecast").

What is fitted and checked is the training as it runs unobserved (``measure``): the steady step
without perfkit's trace window or a restart's first step, and the validation, so that a count is not
forecast with the cost of a fault one run of it met.

The interval claims 90% and is built from error out of sample: each measured count is left out in turn,
the model fitted to the others predicts its epoch, and the log errors of those predictions, with the
repeats' own spread (pooled log sd of single runs), give sigma; the half-width is t(0.95, k-1) x sigma for
k counts left out (Student's t: three counts give two degrees of freedom, so the interval stays wide
until the points have shown they can be predicted). A forecast is marked as not supported, and given no
interval, where the sweep ran fewer than three counts (no count can be left out and still leave two to
fit) or beyond twice its largest count (no count left out tested a step that long).

A cluster file (``hosts``) is forecast too, as ``perfkit run --cluster`` emulates it on the sweep's machine:
each worker on its share of its host's budget, the model's terms on unequal hosts (``model``). No count
of the sweep ran unequal hosts, so none left out tested that reach: the row is marked not supported and
gets no interval (the calibration: benchmarks/measurements).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfkit.analysis.scaling.model import Machine, StepModel, fit, machine_of
from perfkit.analysis.scaling.roles import POINT, PROBE, WORKERS
from perfkit.analysis.stats import t_quantile
from perfkit.cluster import ClusterSpec

FORECAST_COLUMNS = ["workers", "hosts", "measured", "steps", "step_s", "compute_s", "transfer_s", "wait_s", "val_s",
                    "steady_epoch_s", "epoch_lo_s", "epoch_hi_s", "measured_epoch_s", "error", "speedup",
                    "speedup_lo", "speedup_hi", "efficiency", "supported", "support_note"]
TERM_COLUMNS = ["term", "formula", "value", "unit"]
LOO_COLUMNS = ["workers", "fitted_on", "predicted_epoch_s", "measured_epoch_s", "error"]
LEVEL = 0.90
REACH = 2.0  # a forecast beyond this many times the largest count run is not supported


EQUAL = "equal"  # the hosts column of a forecast on the sweep's own equal hosts
UNEQUAL = ("fitted on equal hosts: no count of the sweep had unequal ones, so the points cannot say how sure "
           "this is (no interval)")


def forecast(runs: pd.DataFrame, record: Any, targets: Sequence[int], hosts: ClusterSpec | None = None,
             ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """FORECAST_COLUMNS for ``targets`` on equal hosts and for the cluster ``hosts`` (if given), TERM_COLUMNS
    of the fitted model, and notes."""
    points = fit_points(workers_way(runs))
    strong, notes = record.scaling == "strong", []
    fitted = _fitter(strong, record.cores_per_worker, _val_steps(points, strong), probe_runs(runs))
    model = fitted(points) if not points.empty else None
    if model is None:
        return (pd.DataFrame(columns=FORECAST_COLUMNS), pd.DataFrame(columns=TERM_COLUMNS),
                notes + ["no forecast: it needs complete runs of at least two worker counts"])
    held = leave_one_out(points, fitted)
    sigma, spread = _sigma(held, points)
    counts = sorted(int(n) for n in points["workers"].unique())
    if len(counts) < 3:
        notes.append("forecast from two worker counts: no count can be left out to test the model, so no "
                     "interval is given; run three or more counts")
    ref_rate = _reference_rate(runs, record)
    rows = [_row(model, sigma, len(held), points, n, record, ref_rate, counts) for n in targets]
    if hosts is not None:
        rows.append(_row(model, sigma, len(held), points, hosts.num_workers, record, ref_rate, counts, hosts))
    return (pd.DataFrame(rows, columns=FORECAST_COLUMNS), term_table(model, held, sigma, spread), notes)


def workers_way(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of the workers way (a row with no way: a sweep recorded before --ways): the model's ring
    all-reduce among worker processes is theirs; replicas in one process and ps are not modelled."""
    if runs.empty:
        return runs
    way = runs["way"] if "way" in runs else pd.Series(WORKERS, index=runs.index)
    return runs[(runs["role"] == POINT) & (way.isna() | (way == WORKERS))]


def probe_runs(runs: pd.DataFrame) -> pd.DataFrame | None:
    """The sweep's probes (one worker at a count's per-worker batch: ``studies/sweep.py``), None if it ran
    none (weak scaling, local workers, a sweep recorded before probes)."""
    if runs.empty or "role" not in runs:
        return None
    probes = runs[runs["role"] == PROBE]
    return probes if not probes.empty else None


def fit_points(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with the columns the model is fitted to: the clean step shared out as the run's split
    shares its step (fit_compute_s, fit_transfer_s, fit_wait_s; input folded into compute) and the clean
    epoch (steps x clean step + validation)."""
    p = runs.copy()
    if p.empty:
        return p.assign(fit_compute_s=[], fit_transfer_s=[], fit_wait_s=[], clean_epoch_s=[])
    step = p["step_s"].astype(float)
    for term in ("transfer_s", "wait_s"):
        p[f"fit_{term}"] = p[term].astype(float) / step * p["clean_step_s"].astype(float)
    p["fit_compute_s"] = p["clean_step_s"].astype(float) - p["fit_transfer_s"] - p["fit_wait_s"]
    p["clean_epoch_s"] = p["steps"].astype(float) * p["clean_step_s"].astype(float) + p["clean_val_s"].astype(float)
    return p


def _fitter(strong: bool, cores_per_worker: float | None, val_steps: int,
            probes: pd.DataFrame | None = None) -> Any:
    """The fit of the model to some of the points (all, or all but one count); the probes are measured at
    every count, so a count left out keeps its own (as a forecast count has its probe before it is run)."""
    def fitted(points: pd.DataFrame) -> StepModel | None:
        return fit(points, strong, machine_of(points, cores_per_worker), val_steps, probes)
    return fitted


def _val_steps(points: pd.DataFrame, strong: bool) -> int:
    """Validation steps an epoch at one worker's batch (weak scaling: a count's steps x the count)."""
    if "val_steps" not in points:
        return 0
    v = points["val_steps"].astype(float) * (1 if strong else points["workers"].astype(float))
    return int(v.dropna().max()) if v.notna().any() else 0


def leave_one_out(points: pd.DataFrame, fitted: Any) -> pd.DataFrame:
    """LOO_COLUMNS: each measured count predicted by the model fitted to the other counts (where at least
    two are left), against the mean clean epoch of its runs."""
    rows = []
    known = points[np.isfinite(points["clean_epoch_s"].astype(float))]
    for n in sorted(int(k) for k in known["workers"].unique()):
        rest = points[points["workers"] != n]
        model = fitted(rest) if rest["workers"].nunique() >= 2 else None
        if model is None:
            continue
        mine = known[known["workers"] == n]
        pred = model.epoch(n, float(mine["steps"].astype(float).mean()))
        meas = float(mine["clean_epoch_s"].astype(float).mean())
        rows.append({"workers": n, "fitted_on": ", ".join(str(int(k)) for k in sorted(rest["workers"].unique())),
                     "predicted_epoch_s": pred, "measured_epoch_s": meas,
                     "error": meas / pred - 1 if pred > 0 else math.nan})
    return pd.DataFrame(rows, columns=LOO_COLUMNS)


def _sigma(held: pd.DataFrame, points: pd.DataFrame) -> tuple[float, float]:
    """(sigma, the repeats' spread): the log errors out of sample with the pooled log sd of single runs."""
    logs = np.log1p(held["error"].astype(float).dropna().to_numpy())
    e = points[np.isfinite(points["clean_epoch_s"].astype(float)) & (points["clean_epoch_s"].astype(float) > 0)]
    g = np.log(e["clean_epoch_s"].astype(float)).groupby(e["workers"])
    dev = (np.log(e["clean_epoch_s"].astype(float)) - g.transform("mean")).to_numpy()
    dof = int((g.size() - 1).clip(lower=0).sum())
    spread = float(math.sqrt(np.sum(dev ** 2) / dof)) if dof > 0 else 0.0
    if len(logs) < 2:
        return math.nan, spread
    return float(math.sqrt(np.mean(logs ** 2) + spread ** 2)), spread


def _support(n: int, counts: list[int], sigma: float, model: StepModel) -> tuple[bool, str]:
    if model.probes and not model.probed(n):
        return False, (f"no probe ran at this count's share of the batch: its compute is the line through the "
                       f"fitted counts, which no count left out tested (run the sweep with --forecast {n})")
    if len(counts) < 3 or not sigma == sigma:
        return False, "fewer than three counts run: no count left out to test the model"
    if n > REACH * max(counts):
        return False, (f"beyond {REACH:g}x the largest count run ({max(counts)}): no count left out tested a reach "
                       "that far")
    return True, ""


def _steps(points: pd.DataFrame, record: Any, n: int) -> float:
    """A measured count's steps per epoch; otherwise the training samples over its global batch."""
    same = points[points["workers"] == n]["steps"].astype(float)
    if len(same) and same.notna().all():
        return float(same.mean())
    samples = float((points["steps"].astype(float) * points["global_batch"].astype(float)).max())
    batch = record.batch_size if record.scaling == "strong" else record.batch_size * n
    return float(math.floor(samples / batch)) if samples > 0 else math.nan


def worker_cores(model: StepModel, hosts: ClusterSpec) -> tuple[float, ...]:
    """Each worker's cores in the cluster ``hosts`` emulated on the fitted runs' machine (its hosts' budgets
    scaled to the machine together, a host's shared by its workers; the synchronous run of a ps file runs
    its workers only)."""
    spec = hosts.workers_only()
    budgets = spec.cpu_budgets(model.machine.machine_cores)
    return model.machine.on_hosts([budgets[h.name] / h.workers for h in spec.hosts for _ in range(h.workers)])


def hosts_label(hosts: ClusterSpec) -> str:
    spec = hosts.workers_only()
    name = Path(hosts.source).name if hosts.source else "cluster"
    return f"{name}: " + ", ".join(f"{h.name} {h.cores:g} cores x {h.workers}" for h in spec.hosts)


def _row(model: StepModel, sigma: float, k: int, points: pd.DataFrame, n: int, record: Any, ref_rate: float,
         counts: list[int], hosts: ClusterSpec | None = None) -> dict[str, Any]:
    """A forecast row at ``n`` workers on equal hosts, or on the cluster ``hosts`` (never measured by the sweep,
    whose runs are on equal hosts, and not supported: ``UNEQUAL``)."""
    steps = _steps(points, record, n)
    cores = worker_cores(model, hosts) if hosts is not None else None
    epoch = model.epoch(n, steps, cores)
    supported, why = _support(n, counts, sigma, model) if hosts is None else (False, UNEQUAL)
    half = t_quantile(LEVEL, max(1, k - 1)) * sigma if supported else math.nan
    lo, hi = epoch * math.exp(-half), epoch * math.exp(half)
    own = points[points["workers"] == n] if hosts is None else points.iloc[0:0]
    measured = own["clean_epoch_s"].astype(float).dropna()
    m_epoch = float(measured.mean()) if len(measured) else math.nan
    batch = record.batch_size if record.scaling == "strong" else record.batch_size * n
    speed = (lambda e: steps * batch / e / ref_rate if e > 0 else math.nan)  # noqa: E731 - per sample
    terms = model.terms(n, cores)
    return {"workers": n, "hosts": EQUAL if hosts is None else hosts_label(hosts), "measured": bool(len(measured)),
            "steps": steps, "step_s": sum(terms.values()), **terms, "val_s": model.val(n, cores),
            "steady_epoch_s": epoch, "epoch_lo_s": lo, "epoch_hi_s": hi, "measured_epoch_s": m_epoch,
            "error": m_epoch / epoch - 1 if len(measured) and epoch > 0 else math.nan,
            "speedup": speed(epoch), "speedup_lo": speed(hi), "speedup_hi": speed(lo),
            "efficiency": speed(epoch) / n, "supported": supported, "support_note": why}


def _reference_rate(runs: pd.DataFrame, record: Any) -> float:
    """Samples per second of the reference's clean epochs (as the forecast's own epochs are measured), so
    that a forecast speedup holds no trace window on one side only; the curve's rate where they are not
    known."""
    ref = runs[runs["role"] == "baseline"] if record.reference == "baseline" else \
        workers_way(runs).query("workers == 1")
    ref = fit_points(ref)
    clean = (ref["steps"].astype(float) * ref["global_batch"].astype(float) / ref["clean_epoch_s"].astype(float))
    if len(clean) and clean.notna().all():
        return float(clean.mean())
    known = runs[np.isfinite(runs["speedup"].astype(float)) & (runs["speedup"].astype(float) > 0)]
    return float((known["rate"] / known["speedup"]).mean()) if len(known) else math.nan


def term_table(model: StepModel, held: pd.DataFrame, sigma: float, spread: float) -> pd.DataFrame:
    """The fitted model, one row per term, the measured facts it was given, and its errors out of sample."""
    m: Machine = model.machine
    x = "1/N" if model.strong else "1"
    rows = [(f"compute of one worker at the batch share of {n} workers (measured: the probes)", f"P({n})", v,
             "core-s") for n, v in model.probes]
    rows += [("compute each of several workers spends beside its probe's (fitted)", "e", model.extra, "core-s")
             ] if model.probes else []
    rows += [
        ("compute, paid by every worker whatever its share" + (" (counts without a probe)" if model.probes else ""),
         "c0", model.c0, "core-s"),
        (f"compute of the worker's share of the batch (x = {x})", "c1 * x", model.c1, "core-s"),
        ("exposed all-reduce per doubling of the workers", "lam * log2(N)", model.lam, "core-s"),
        ("wait for the slowest worker", "omega * sqrt(2 ln N)", model.omega, "core-s"),
        ("validation, fixed per epoch", "v0", model.v0, "core-s"),
        ("validation of the worker's share of the validation set", "v1 / N", model.v1, "core-s"),
        ("validation steps at one worker's batch (their collectives at lam each)", "V", float(model.val_steps),
         "count"),
        ("cores per worker (measured: the sweep's budget; local workers share the machine)", "C",
         m.cores_per_worker if m.cores_per_worker is not None else math.nan, "cores"),
        ("the machine's cores (measured)", "M", m.machine_cores, "cores"),
        ("cores busy with anything but the workers (measured)", "L", m.other_cores, "cores"),
        ("the repeats' spread (pooled sd of log epoch)", "s", spread, "log"),
        (f"error out of sample, with the spread ({LEVEL:.0%} interval: t x sigma)", "sigma", sigma, "log"),
    ]
    rows += [(f"left out {int(r.workers)} (fitted on {r.fitted_on}): measured / predicted - 1", "loo",
              float(r.error), "share") for r in held.itertuples()]
    return pd.DataFrame([{"term": t, "formula": f, "value": v, "unit": u} for t, f, v, u in rows],
                        columns=TERM_COLUMNS)
