"""The step-time model of the scaling forecast (docs/scaling.md, "The model"), and its fit.

For N workers, x = per-worker batch / the batch of one worker (strong scaling: 1/N; weak: 1), and A(N) the
cores a worker's step runs on:

    A(N)      = C / max(1, (N * C + L) / M)      emulated hosts of C cores (a scale model): their budget,
                                                   shared out when the workers' budgets and the rest of the
                                                   machine's load (L) need more than its M cores
              = (M - L) / N                        local workers: the machine's cores, shared
    step(N)   = [ K(N)                             compute (below)
                + lam * log2(N)                    the exposed all-reduce: a cost per doubling of the group
                + omega * sqrt(2 ln N) ] / A(N)    waiting for the slowest of N (expected maximum)
    val(N)    = [ v0 + v1 / N + V(N) * lam * log2(N) ] / A(N)   validation: a fixed part, each worker's
                                                   share of the validation set (1/N, strong or weak), and its
                                                   V(N) steps' own collectives at the training's latency
    epoch(N)  = steps(N) * step(N) + val(N)

    K(N)      = P(N) + e * [N > 1]                 a strong-scaling scale model with probes: P(N), one
                                                   worker's step at N's per-worker batch, measured (the
                                                   sweep's probes), and e, what each of several worker
                                                   processes spends beside it (gRPC, the collective
                                                   executor's threads), fitted on the counts above one
              = c0 + c1 * x                        otherwise: the worker's share of the batch, and a part
                                                   each process pays whatever its share

Why probes: a worker's compute need not be smooth in its share of the batch (halving the batch can cost
far more or far less than half as much), so a line through the fitted counts' batches can miss a larger
count's by much more than the rest of the model does; the compute was the term that missed out of sample
(benchmarks/measurements). A probe measures it instead: a few dozen steps of one worker, at each count
run and forecast.

Hosts of unequal cores (a cluster file: worker i on A_i cores, its host's budget shared by its workers) are
the same terms where each one runs: the compute and the validation's own work on the slowest worker's cores
(the others wait for it), the all-reduce at the ring's mean pace, mean(1 / A_i) (each hop of a ring runs
on the worker it passes through), and the wait only among the workers as slow as the slowest (within
TIED of its cores): a worker with more cores finishes first and is not the one waited for. Equal hosts
give the formulas above.

The all-reduce is one coefficient, per doubling: the exposed all-reduce in the traces of this project's
sweeps grew by about the same amount from 2 to 4 workers as from 4 to 8 (strong and weak scaling;
benchmarks/measurements). A ring's two terms (bytes 2(N-1)/N * G and a latency per extra worker) need two
multi-worker counts for two coefficients, so a sweep of 1, 2 and 4 would have no count to spare for them
and leave-one-out could not fit them at all; one latency per extra worker alone overshot the 8-worker
transfer by a third, the bytes term alone undershot it.

Every coefficient is in core-seconds (seconds on one core): each run's measured seconds are multiplied by its
own A(N) before fitting, so the coefficients hold whatever the count's cores. Measured, not fitted: C (the
sweep's), M (run.json's machine) and L (cores busy with anything but the workers, over the fitted runs'
training windows, mean). A worker's whole budget counts as demand, not its mean use over the window:
synchronous workers compute at the same moments and exchange at the same moments, so while they compute
they ask for all of it together. Fitted: each term to its own measured column, least squares, every
coefficient >= 0, fewer per column than the counts it is fitted to (compute and validation two, on every
count; all-reduce, wait and e one each, on the counts above one). P(N) is measured: the probes' clean
step in core-seconds (on A(1), one host of the scale model), the mean of their repeats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

# Workers whose cores are within this share of the slowest's count as tied with it for the wait: an expected
# maximum over noise of a few percent a step (docs/scaling.md).
TIED = 0.1


@dataclass(frozen=True)
class Machine:
    """What the model takes from measurement instead of fitting it."""

    cores_per_worker: float | None  # C; None: local workers sharing the machine
    machine_cores: float  # M
    other_cores: float  # L

    def cores(self, n: int) -> float:
        """A(n): the cores one worker's step runs on."""
        free = max(self.machine_cores - self.other_cores, 1e-9)
        if self.cores_per_worker is None:
            return free / n
        c = self.cores_per_worker
        return c / max(1.0, (n * c + self.other_cores) / self.machine_cores)

    def placement(self, n: int) -> tuple[float, ...]:
        """Each of ``n`` workers' cores on equal hosts."""
        return (self.cores(n),) * n

    def on_hosts(self, budgets: Sequence[float]) -> tuple[float, ...]:
        """Each worker's cores where worker i's share of its host's budget is ``budgets[i]``: shared out as
        ``cores`` shares equal hosts, when the budgets and the other load need more than the machine has."""
        demand = (sum(budgets) + self.other_cores) / self.machine_cores
        return tuple(b / max(1.0, demand) for b in budgets)


@dataclass(frozen=True)
class StepModel:
    c0: float
    c1: float
    lam: float
    omega: float
    v0: float
    v1: float
    strong: bool
    machine: Machine
    val_steps: int = 0  # V at one worker's batch: strong scaling keeps it, weak divides it by N
    probes: tuple[tuple[int, float], ...] = ()  # (N, P(N) core-s): one worker measured at N's share
    extra: float = 0.0  # e, core-s

    def probed(self, n: int) -> bool:
        return any(k == n for k, _ in self.probes)

    def compute(self, n: int) -> float:
        """K(n), core-seconds a step: from the probe at ``n`` where one ran, else the fitted line."""
        p = next((v for k, v in self.probes if k == n), None)
        return p + (self.extra if n > 1 else 0.0) if p is not None else self.c0 + self.c1 * self.x(n)

    def v_steps(self, n: int) -> int:
        return self.val_steps if self.strong else max(1, math.ceil(self.val_steps / n))

    def x(self, n: int) -> float:
        return 1.0 / n if self.strong else 1.0

    def terms(self, n: int, cores: Sequence[float] | None = None) -> dict[str, float]:
        """Seconds per step of each term at ``n`` workers, on equal hosts or on ``cores`` (one per worker)."""
        a = tuple(cores) if cores is not None else self.machine.placement(n)
        slow, ring = min(a), float(np.mean([1 / c for c in a]))
        tied = sum(1 for c in a if c <= slow * (1 + TIED))
        return {"compute_s": self.compute(n) / slow, "transfer_s": self.lam * math.log2(n) * ring,
                "wait_s": self.omega * math.sqrt(2 * math.log(tied)) / slow if tied > 1 else 0.0}

    def val(self, n: int, cores: Sequence[float] | None = None) -> float:
        a = tuple(cores) if cores is not None else self.machine.placement(n)
        ring = float(np.mean([1 / c for c in a]))
        return (self.v0 + self.v1 / n) / min(a) + self.v_steps(n) * self.lam * math.log2(n) * ring

    def epoch(self, n: int, steps: float, cores: Sequence[float] | None = None) -> float:
        return steps * sum(self.terms(n, cores).values()) + self.val(n, cores)


def lstsq(a: np.ndarray, y: np.ndarray, nonneg: Sequence[int] = ()) -> np.ndarray:
    """Least squares, the columns in ``nonneg`` held >= 0 (every subset of free columns tried: a column has
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


def machine_of(points: pd.DataFrame, cores_per_worker: float | None) -> Machine:
    """C, M and L from the fitted runs (columns machine_cores, other_cores)."""
    m = points["machine_cores"].astype(float).dropna()
    machine = float(m.max()) if len(m) else math.nan
    other = points["other_cores"].astype(float).dropna()
    if not machine > 0:  # a record without the machine: the budgets never bind, local workers get one core
        return Machine(cores_per_worker, math.inf if cores_per_worker else 1.0, 0.0)
    return Machine(cores_per_worker, machine, float(other.mean()) if len(other) else 0.0)


def fit(points: pd.DataFrame, strong: bool, machine: Machine, val_steps: int = 0,
        probes: pd.DataFrame | None = None) -> StepModel | None:
    """The model fitted to ``points`` (runs with clean_step_s and the split's shares) and the ``probes``
    (runs with workers and clean_step_s); None when they hold fewer than two counts with a compute term."""
    p = points[np.isfinite(points["fit_compute_s"].astype(float))]
    if p["workers"].nunique() < 2:
        return None
    core_s = lambda d, col: d[col].astype(float).to_numpy() * np.array([machine.cores(int(n)) for n in d["workers"]])  # noqa: E731
    n = p["workers"].astype(float).to_numpy()
    x = 1 / n if strong else np.ones_like(n)
    # Every coefficient >= 0: a machine whose steps slow down with more workers shows as the fit's
    # out-of-sample error (and so in the interval), not as a negative cost per sample.
    c0, c1 = lstsq(np.column_stack([np.ones_like(n), x]), core_s(p, "fit_compute_s"), nonneg=(0, 1))
    t = p[np.isfinite(p["fit_transfer_s"].astype(float)) & (p["workers"] > 1)]
    nt = t["workers"].astype(float).to_numpy()
    (lam,) = lstsq(np.log2(nt)[:, None], core_s(t, "fit_transfer_s"), nonneg=(0,)) if len(t) else (0.0,)
    w = p[np.isfinite(p["fit_wait_s"].astype(float)) & (p["workers"] > 1)]
    nw = w["workers"].astype(float).to_numpy()
    (omega,) = lstsq(np.sqrt(2 * np.log(nw))[:, None], core_s(w, "fit_wait_s"), nonneg=(0,)) if len(w) else (0.0,)
    v = p[np.isfinite(p["clean_val_s"].astype(float))]
    nv = v["workers"].astype(float).to_numpy()
    steps_v = v["val_steps"].astype(float).fillna(0).to_numpy() if "val_steps" in v else np.zeros_like(nv)
    own = core_s(v, "clean_val_s") - steps_v * lam * np.log2(nv)  # its collectives, at the training's latency
    v0, v1 = lstsq(np.column_stack([np.ones_like(nv), 1 / nv]), own, nonneg=(0, 1)) if len(v) else (0.0, 0.0)
    probed = _probed(probes, machine)
    return StepModel(*(float(c) for c in (c0, c1, lam, omega, v0, v1)), strong=strong, machine=machine,
                     val_steps=val_steps, probes=probed, extra=_extra(p, probed, core_s(p, "fit_compute_s")))


def _probed(probes: pd.DataFrame | None, machine: Machine) -> tuple[tuple[int, float], ...]:
    """(N, P(N)): the mean clean step of the probes at N's share, in core-seconds on one host's cores."""
    if probes is None or probes.empty:
        return ()
    step = probes["clean_step_s"].astype(float)
    mean = step[np.isfinite(step)].groupby(probes["workers"].astype(int)).mean()
    return tuple((int(n), float(v) * machine.cores(1)) for n, v in mean.items())


def _extra(p: pd.DataFrame, probed: tuple[tuple[int, float], ...], compute: np.ndarray) -> float:
    """e: what the runs above one worker computed beyond their count's probe (least squares: the mean), >= 0;
    0 where none of them has a probe."""
    known = dict(probed)
    above = [(c - known[int(n)]) for n, c in zip(p["workers"], compute) if int(n) > 1 and int(n) in known]
    return float(lstsq(np.ones((len(above), 1)), np.array(above), nonneg=(0,))[0]) if above else 0.0
