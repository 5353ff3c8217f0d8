"""The speedup waterfall: from the ideal speedup of a synchronous run over its baseline down to the measured
one, term by term, every term measured from the two runs' own records (docs/figures.md, "Waterfall").

The unit the terms add in is **seconds per 1,000 samples of a steady epoch** (epochs after the first):
time adds, speedups do not. For each run, each part of a steady epoch is measured on its own:

- from the step split (``stragglers.StepSplit``: the trace window's steps, or every steady step estimated
  from CPU samples), per step and mean over the workers, at the untraced steps' pace (``pace_factor``: the
  profiler slows every part of a traced step, and the trace window term holds what it cost): ``compute``
  (ops' self time), ``framework`` (busy time in no op: the runtime's per-step work), ``contention`` (busy
  time a worker of an oversubscribed host waited for a core: ``overheads.oversubscription``, taken out of
  compute), ``input``, ``allreduce`` (the exposed all-reduce every worker paid) and ``wait`` (for the
  slowest worker), each divided by the global samples of the compared steps;
- from the step and epoch records of the steady epochs: ``outside`` (an epoch's time beyond its steps:
  validation, callbacks, the gaps between steps; not the capture's stop in a validation, which is the
  window's) and ``trace`` (the time perfkit's trace window added, ``overheads.window_cost``).

The ideal is the compute the run was given over the baseline's: its worker hosts' cores (their CPU budgets
where emulated, else their declared cores) over the baseline's; 4 workers on the baseline's own 2 cores have
an ideal of 1.0x. A term's loss is the run's part less the baseline's part over the ideal (what the part
would be if the baseline's work were spread perfectly over the run's compute); ``not explained`` is the
measured time less the ideal and every term, so the terms sum exactly to the measured gap. A term's share of
the lost speedup (ideal - measured, in x) is its share of the lost time, so the speedup bars add up too and
do not depend on the order they are drawn in (largest first, ``not explained`` last).

Only synchronous runs (single, multi) have a waterfall: ParameterServerStrategy's workers do not wait for
each other and the split has no per-step terms for them. Analysers only compute; renderers draw.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

import numpy as np
import pandas as pd

from perfkit.analysis.advice.records import CauseKind
from perfkit.analysis.cpu import host_budgets, worker_hosts
from perfkit.analysis.overheads import Oversubscription, WindowCost
from perfkit.analysis.stragglers import StepSplit, step_keys
from perfkit.results import RunMeta, RunRecord


class Term(str, Enum):
    """A part of a steady epoch that the waterfall measures (``UNEXPLAINED``: what none of them holds)."""

    COMPUTE = "compute"
    FRAMEWORK = "framework"
    CONTENTION = "cpu_contention"
    INPUT = "input"
    ALLREDUCE = "allreduce"
    WAIT = "wait"
    OUTSIDE = "outside_steps"
    TRACE = "trace_window"
    UNEXPLAINED = "not_explained"

    @property
    def column(self) -> str:
        return f"wf_{self.value}_s"

    @property
    def words(self) -> str:
        return _WORDS[self]


_WORDS = {
    Term.COMPUTE: "compute", Term.FRAMEWORK: "per-step framework time", Term.CONTENTION: "CPU contention",
    Term.INPUT: "input", Term.ALLREDUCE: "the all-reduce not hidden under compute",
    Term.WAIT: "waiting for the slowest worker", Term.OUTSIDE: "time outside the steps (validation, callbacks)",
    Term.TRACE: "perfkit's trace window", Term.UNEXPLAINED: "not explained",
}
MEASURED = tuple(t for t in Term if t is not Term.UNEXPLAINED)
SPLIT_TERMS = (Term.COMPUTE, Term.FRAMEWORK, Term.CONTENTION, Term.INPUT, Term.ALLREDUCE, Term.WAIT)
# Where a part that one side could not measure is counted, on both sides alike: an estimated split folds
# framework time into busy time and input into the collective; a run without any split has only its steps.
_HOME = {Term.FRAMEWORK: Term.COMPUTE, Term.CONTENTION: Term.COMPUTE, Term.INPUT: Term.ALLREDUCE,
         Term.ALLREDUCE: Term.COMPUTE, Term.WAIT: Term.COMPUTE}
# The waterfall term each cause of advice is part of (a tune run of that advice checks it); validation is in
# the outside-the-steps term with the rest of an epoch's edges, so its advice checks no term alone.
TERM_OF_CAUSE = {CauseKind.REDUCTIONS: Term.ALLREDUCE, CauseKind.GRADIENTS: Term.ALLREDUCE,
                 CauseKind.FRAMEWORK: Term.FRAMEWORK, CauseKind.STRAGGLER: Term.WAIT, CauseKind.INPUT: Term.INPUT,
                 CauseKind.OVERSUBSCRIBED: Term.CONTENTION, CauseKind.TRACE_WINDOW: Term.TRACE}
CORES = "wf_cores"
STEPS = "wf_steps_s"
ROW_COLUMNS = [t.column for t in MEASURED] + [STEPS, CORES]
CHECK_COLUMNS = ["checked_by", "predicted_speedup", "measured_speedup"]
COLUMNS = ["run_id", "level", "order", "term", "words", "run_s", "ideal_s", "lost_s", "share", "speedup_lost",
           "speedup_after", *CHECK_COLUMNS]


def run_parts(record: RunRecord, epochs: pd.DataFrame, split: StepSplit | None, trace: pd.DataFrame | None,
              window: WindowCost | None, oversub: Oversubscription | None) -> dict[str, float]:
    """One run's parts of a steady epoch, seconds per 1,000 samples (NaN: not measured), and its cores."""
    out = dict.fromkeys(ROW_COLUMNS, math.nan)
    out[CORES] = compute_cores(record.run)
    steady = _steady(epochs)
    samples = float(steady["samples"].sum()) if not steady.empty else 0.0
    if samples <= 0 or record.steps.empty or "samples" not in record.steps:
        return out
    per_1k = 1000.0 / samples
    steps = record.steps[record.steps["epoch"].isin(steady["epoch"] - 1)]
    steps_s = _mean_step_total(steps)
    out[STEPS] = steps_s * per_1k
    here = window if window is not None and window.epoch + 1 in set(steady["epoch"]) else None
    trace_s = max(0.0, here.extra_s) if here is not None else 0.0
    stop_s = min(max(0.0, here.stop_s), trace_s) if here is not None else 0.0  # in validation, not the steps
    out[Term.TRACE.column] = trace_s * per_1k
    out[Term.OUTSIDE.column] = (float(steady["epoch_s"].sum()) - steps_s - stop_s) * per_1k
    if split is not None:
        # traced steps no slower than the untraced ones: no profiler's cost to take out of them
        r = 1.0 if here is not None and here.extra_s <= 0 else pace_factor(
            record.steps, steps, split, here.pace_s if here is not None else math.nan)
        out.update(_split_parts(split, trace, record.steps, oversub, r))
    return out


def pace_factor(every: pd.DataFrame, steady: pd.DataFrame, split: StepSplit, pace: float = math.nan) -> float:
    """The untraced steps' pace over the traced steps', both in seconds per sample: a traced step runs slower
    by the profiler's own cost, which the trace window term holds (``overheads.window_cost``: the traced
    steps over ``pace``, the median untraced step of their epoch), so the split's parts are taken at the
    untraced pace. The traced steps' mean (not their median) is what the split's parts add up to, so the
    steps' time, the window's extra and the split agree but for how the untraced steps stray from their
    median: what the trace did not see, left to ``not explained``. ``every``: all step records (the trace
    may hold a first epoch's steps); ``steady``: the steady epochs' (the pace where no window is in them);
    1 for a split estimated from CPU samples."""
    if split.source != "trace" or every.empty:
        return 1.0
    width = int(max(split.steps["step"].max(), every["step"].max())) + 1
    keys = pd.unique(step_keys(split.steps, width))
    traced = every[np.isin(step_keys(every, width), keys)]
    if not math.isfinite(pace):
        own = steady[~np.isin(step_keys(steady, width), keys) & (steady["samples"] > 0)]
        rates = (own["duration_s"] / own["samples"]).groupby(own["worker"]).median()
        pace = float(rates.median()) if not rates.empty else math.nan
    samples = float(traced["samples"].sum())
    per_sample = float(traced["duration_s"].sum()) / samples if samples > 0 else math.nan
    r = pace / per_sample
    return r if math.isfinite(r) and r > 0 else 1.0


def _steady(epochs: pd.DataFrame) -> pd.DataFrame:
    """The epochs the steady figure is taken over: after the first (the only one, when there is one)."""
    return epochs.iloc[1:] if len(epochs) > 1 else epochs


def step_means(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per step (epoch, step) of ``steps``: its mean duration over the workers that recorded it, and its
    global samples (the sum over them); the one reading of a synchronous step both the waterfall and
    ``perfkit diff`` take."""
    if steps.empty:
        return np.array([]), np.array([])
    codes, _ = pd.factorize(step_keys(steps, int(steps["step"].max()) + 1))
    duration = np.bincount(codes, steps["duration_s"].to_numpy(float)) / np.bincount(codes)
    samples = (np.bincount(codes, steps["samples"].to_numpy(float)) if "samples" in steps
               else np.zeros(len(duration)))
    return duration, samples


def _mean_step_total(steps: pd.DataFrame) -> float:
    """Sum over steps of the step's mean duration over the workers that recorded it."""
    return float(step_means(steps)[0].sum())


def _split_parts(split: StepSplit, trace: pd.DataFrame | None, steps: pd.DataFrame,
                 oversub: Oversubscription | None, r: float) -> dict[str, float]:
    """Per 1,000 samples of the compared steps: the split's terms, mean over workers and steps."""
    df = split.steps
    width = int(max(df["step"].max(), steps["step"].max())) + 1
    keys = pd.unique(step_keys(df, width))
    samples = float(steps["samples"].to_numpy(float)[np.isin(step_keys(steps, width), keys)].sum())
    if samples <= 0:
        return {}
    # From per step to per 1,000 samples, at the untraced steps' pace: the profiler slows every part (a traced
    # straggler also makes the others wait longer), so each is scaled alike (pace_factor).
    scale = len(keys) * 1000.0 / samples * r
    busy = float(df["busy_s"].mean())
    framework = _framework(df, trace, width) if split.source == "trace" else math.nan
    contention = min(oversub.waited_s, busy) if oversub is not None else 0.0
    compute = busy - contention - (0.0 if math.isnan(framework) else framework)
    transfer, wait, inputs = (float(df[c].mean()) for c in ("transfer_s", "wait_s", "input_s"))
    return {Term.COMPUTE.column: compute * scale, Term.FRAMEWORK.column: framework * scale,
            Term.CONTENTION.column: contention * scale, Term.INPUT.column: inputs * scale,
            Term.ALLREDUCE.column: transfer * scale, Term.WAIT.column: wait * scale}


def _framework(df: pd.DataFrame, trace: pd.DataFrame | None, width: int) -> float:
    """Mean over the compared steps' rows of the trace's ``other_s`` (busy time in no op)."""
    if trace is None or trace.empty or "other_s" not in trace:
        return math.nan
    keys = pd.unique(step_keys(df, width))
    own = trace[np.isin(step_keys(trace, width), keys)]
    return float(own["other_s"].astype(float).mean()) if not own.empty else math.nan


def compute_cores(meta: RunMeta) -> float:
    """Cores the run's workers were given: the sum over their hosts of each host's budget (applied, else
    requested, else declared cores); NaN when no host's cores are recorded."""
    budgets = host_budgets(meta)
    hosts = set(worker_hosts(meta).values()) or {str(h.get("name")) for h in meta.cluster.hosts}
    known = [budgets[h] for h in hosts if h in budgets]
    return float(sum(known)) if known and len(known) == len(hosts) else math.nan


def waterfall_table(runs: pd.DataFrame, baseline_id: str | None, goodput: pd.DataFrame | None = None
                    ) -> pd.DataFrame:
    """Per synchronous run other than the baseline (``runs``: the analysis' run rows, with ``ROW_COLUMNS``):
    one row per term, largest loss first and ``not explained`` last (``COLUMNS``), for a steady epoch
    (``level`` steady) and, from the goodput ledgers, for the whole command (``level`` command)."""
    base = runs[runs["run_id"] == baseline_id] if baseline_id else runs.iloc[0:0]
    if base.empty or CORES not in runs:
        return pd.DataFrame(columns=COLUMNS)
    b = base.iloc[0]
    frames = []
    for _, r in runs.iterrows():
        if r["run_id"] != baseline_id and r["mode"] != "ps":
            frames += [_one(r, b), command_rows(r, b, goodput) if goodput is not None else None]
    frames = [f for f in frames if f is not None]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)


def ideal_speedup(run: Any, base: Any) -> float:
    """The compute the run was given over the baseline's (NaN: either's cores unknown)."""
    ideal = float(run[CORES]) / float(base[CORES])
    return ideal if math.isfinite(ideal) and ideal > 0 else math.nan


def _per_1k(row: Any) -> float:
    epoch, samples = float(row["steady_epoch_s"]), float(row["steady_epoch_samples"])
    return epoch / samples * 1000.0 if samples > 0 and math.isfinite(epoch) else math.nan


def _one(run: Any, base: Any) -> pd.DataFrame | None:
    ideal, measured_s, base_s = ideal_speedup(run, base), _per_1k(run), _per_1k(base)
    if not all(math.isfinite(x) for x in (ideal, measured_s, base_s)):
        return None
    own, other = _parts(run), _parts(base)
    if own is None or other is None:
        return None
    mine, theirs = _fold(own[0], other[0], other[1])
    return _rows(run["run_id"], STEADY, ideal, (measured_s, base_s), mine, theirs)


STEADY, COMMAND = "steady", "command"  # the two levels: a steady epoch, and the whole command


def _rows(run_id: str, level: str, ideal: float, times: tuple[float, float], mine: dict[Any, float],
          theirs: dict[Any, float]) -> pd.DataFrame:
    """One level's rows: each part's loss against the baseline's part over the ideal, largest first, and
    ``not explained`` (the measured gap less them all) last. ``times``: the run's and the baseline's
    seconds per 1,000 samples."""
    measured_s, base_s = times
    lost: dict[Any, float] = {t: mine[t] - theirs.get(t, 0.0) / ideal for t in mine}
    gap_s = measured_s - base_s / ideal
    lost[Term.UNEXPLAINED] = gap_s - sum(lost.values())
    speedup_gap = ideal - base_s / measured_s
    order = sorted((t for t in lost if t is not Term.UNEXPLAINED), key=lambda t: -lost[t]) + [Term.UNEXPLAINED]
    rows, after = [], ideal
    for i, term in enumerate(order):
        share = lost[term] / gap_s if gap_s else math.nan
        took = speedup_gap * share if gap_s else 0.0
        after -= took
        rows.append({"run_id": run_id, "level": level, "order": i, "term": term.value, "words": term.words,
                     "run_s": mine.get(term, math.nan), "ideal_s": theirs.get(term, 0.0) / ideal
                     if term is not Term.UNEXPLAINED else math.nan, "lost_s": lost[term], "share": share,
                     "speedup_lost": took, "speedup_after": after})
    return pd.DataFrame(rows, columns=COLUMNS)


def command_rows(run: Any, base: Any, goodput: pd.DataFrame) -> pd.DataFrame | None:
    """The whole command's level: the goodput ledger's buckets (mean over the workers) per 1,000 of the
    samples the run trained, against the baseline's over the ideal. The buckets add up to the span, so
    ``not explained`` is zero but for rounding."""
    from perfkit.analysis.goodput import Bucket

    ideal = ideal_speedup(run, base)
    sides = []
    for row in (run, base):
        own = goodput[goodput["run_id"] == row["run_id"]] if not goodput.empty else goodput
        samples = float(row["samples"])
        if own.empty or not samples > 0:
            return None
        per_1k = 1000.0 / samples
        # a bucket not measured (checkpoint saves of an older run) was carved out of nothing: its seconds are
        # still in the others, so it counts 0 on that side
        buckets = {b: float(own[b.column].mean()) for b in Bucket}
        sides.append(({b: (v if math.isfinite(v) else 0.0) * per_1k for b, v in buckets.items()},
                      float(own["span_s"].mean()) * per_1k))
    if not math.isfinite(ideal):
        return None
    (mine, measured_s), (theirs, base_s) = sides
    return _rows(run["run_id"], COMMAND, ideal, (measured_s, base_s), mine, theirs)


def _parts(row: Any) -> tuple[dict[Term, float], bool] | None:
    """A run row's measured parts and whether they hold a split; None without the steps' time."""
    steps = float(row.get(STEPS, math.nan))
    if not math.isfinite(steps):
        return None
    parts = {t: float(row.get(t.column, math.nan)) for t in MEASURED}
    split = any(math.isfinite(parts[t]) for t in SPLIT_TERMS)
    if not split:  # the steps as one part
        parts[Term.COMPUTE] = steps - parts[Term.TRACE]
    return parts, split


def _fold(run: dict[Term, float], base: dict[Term, float], base_split: bool
          ) -> tuple[dict[Term, float], dict[Term, float]]:
    """Both sides with the same terms. A baseline without a split is one process's steps: no wait, no
    exchange between workers, no contention among them; its input and framework time are in its compute.
    A part that either side lacks is counted in another part on both sides alike: where an estimated split
    holds it (input in the exposed all-reduce, framework time in compute), else in compute."""
    run, base = dict(run), dict(base)
    if not base_split:
        base.update({Term.ALLREDUCE: 0.0, Term.WAIT: 0.0, Term.CONTENTION: 0.0})
    for term in (Term.FRAMEWORK, Term.INPUT, Term.CONTENTION, Term.WAIT, Term.ALLREDUCE):
        if math.isfinite(run[term]) and math.isfinite(base[term]):
            continue
        estimated = term is Term.INPUT and not math.isfinite(run[term]) and math.isfinite(run[Term.ALLREDUCE])
        home = Term.ALLREDUCE if estimated else Term.COMPUTE
        for side in (run, base):
            side[home] = _add(side[home], side.pop(term))
    return run, base


def _add(x: float, y: float) -> float:
    return (0.0 if math.isnan(x) else x) + (0.0 if math.isnan(y) else y)


def checked_terms(waterfall: pd.DataFrame, verifications: pd.DataFrame, runs: pd.DataFrame,
                  metas: dict[str, RunMeta] | None = None) -> pd.DataFrame:
    """The waterfall with, beside a term that a run made to remove it removed, that run and the speedup
    predicted without the term against the one it measured: the equal-workers run (``perfkit compare
    --verify``) removes the wait for the slowest worker; a run ``perfkit tune`` made of one piece of advice
    (``run.json``'s ``tries``) the term its cause is part of (``TERM_OF_CAUSE``: ``--metrics minimal`` the
    metrics' reductions, in the exposed all-reduce). Other rows keep null."""
    checks = _verified(verifications, runs) + _tried(metas or {}, runs)
    if waterfall.empty or not checks:
        return waterfall
    out = waterfall.astype({"checked_by": object})
    for run_id, term, by, predicted, measured in checks:
        row = (out["run_id"] == run_id) & (out["level"] == STEADY) & (out["term"] == term.value)
        out.loc[row, CHECK_COLUMNS] = [by, predicted, measured]
    return out


Check = tuple[str, "Term", str, float, float]  # (run, term, checked by, predicted speedup, measured speedup)


def _verified(verifications: pd.DataFrame, runs: pd.DataFrame) -> list[Check]:
    from perfkit.analysis.verify import EQUAL_WORKERS

    speedup = _speedups(runs)
    out = []
    for v in verifications.itertuples(index=False):
        if v.what != EQUAL_WORKERS or v.run_id not in speedup.index:
            continue
        scale = float(speedup[v.run_id]) * float(runs.set_index("run_id").loc[v.run_id, "steady_epoch_s"])
        out.append((v.run_id, Term.WAIT, v.verified_by, scale / float(v.predicted_epoch_s),
                    float(speedup.get(v.verified_by, math.nan))))
    return out


def _tried(metas: dict[str, RunMeta], runs: pd.DataFrame) -> list[Check]:
    """A tune run of one piece of advice against the run it was advised on: the speedup predicted (that run's
    x the change's predicted gain) and the mean speedup the change's runs measured. A combination of changes
    acts on several terms: none is checked by it."""
    speedup = _speedups(runs)
    tried: dict[tuple[str, Term], list[tuple[str, float]]] = {}
    for run_id, meta in metas.items():
        t = meta.tries
        kinds, advised = t.get("kinds") or [], t.get("run_id")
        if len(kinds) != 1 or advised not in speedup.index or run_id not in speedup.index:
            continue
        term = _term_of(kinds[0])
        if term is not None:
            tried.setdefault((advised, term), []).append((run_id, float(t.get("predicted_speedup", math.nan))))
    return [(advised, term, ", ".join(r for r, _ in each), float(speedup[advised]) * each[0][1],
             float(speedup[[r for r, _ in each]].astype(float).mean())) for (advised, term), each in tried.items()]


def _term_of(kind: str) -> Term | None:
    try:
        return TERM_OF_CAUSE.get(CauseKind(kind))
    except ValueError:  # a cause a later perfkit recorded
        return None


def _speedups(runs: pd.DataFrame) -> pd.Series:
    return runs.set_index("run_id")["speedup"] if "speedup" in runs else pd.Series(dtype=float)
