"""The speedup waterfall: from the ideal speedup of a synchronous run over its baseline down to the measured
one, term by term, every term measured from the two runs' own records (docs/figures.md, "Waterfall").

The unit the terms add in is **seconds per 1,000 samples of a steady epoch** (epochs after the first):
time adds, speedups do not. For each run, each part of a steady epoch is measured on its own:

- from the step split (``stragglers.StepSplit``: the trace window's steps, or every steady step estimated
  from CPU samples), per step and mean over the workers, at each steady epoch's untraced pace
  (``waterfall_parts.pace_factor``: the profiler slows every part of a traced step, and the trace window
  term holds what it cost; a machine's load, every part of an epoch's steps): ``compute``
  (ops' self time), ``framework`` (busy time in no op: the runtime's per-step work), ``contention`` (busy
  time a worker of an oversubscribed host waited for a core: ``overheads.oversubscription``, taken out of
  compute), ``input``, ``allreduce`` (the exposed all-reduce every worker paid) and ``wait`` (for the
  slowest worker), each divided by the global samples of the compared steps;
- from the step and epoch records of the steady epochs: ``outside`` (an epoch's time beyond its steps:
  validation, callbacks, the gaps between steps; not the capture's stop in a validation, which is the
  window's), ``trace`` (the time perfkit's trace window added, ``overheads.window_cost``) and ``restart``
  (the first step of an attempt a restart ran, over the untraced pace: the step function traced and
  compiled again, the workers rejoining). The steps are the final attempts' (as the steady epoch's time):
  a lost attempt's are not in a steady epoch; the whole command's level counts them.

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

import pandas as pd

from perfkit.analysis.advice.records import CauseKind
from perfkit.results import RunMeta


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
    RESTART = "restart"
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
    Term.TRACE: "perfkit's trace window", Term.RESTART: "a restart's first step",
    Term.UNEXPLAINED: "not explained",
}
MEASURED = tuple(t for t in Term if t is not Term.UNEXPLAINED)
SPLIT_TERMS = (Term.COMPUTE, Term.FRAMEWORK, Term.CONTENTION, Term.INPUT, Term.ALLREDUCE, Term.WAIT)
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
        parts[Term.COMPUTE] = steps - parts[Term.TRACE] - _add(0.0, parts[Term.RESTART])
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
    for term in (Term.FRAMEWORK, Term.INPUT, Term.CONTENTION, Term.WAIT, Term.ALLREDUCE, Term.RESTART):
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
