"""Advice: the causes of lost speed of a synchronous multi-worker run, ranked by what they cost a steady
epoch, each with the knob that acts on it and the gain predicted from this run's own figures
(docs/figures.md, "advice"; ``perfkit tune`` runs them and reports predicted against measured).

Per compared step (the trace's, or the CPU-seconds estimate's), means over workers and steps:

- metric and loss reductions: ``small = collective_total_s - allreduce_max_s`` (every collective's time but
  the longest one) plus their share, (n - 1) / n, of the idle gaps of the step's chain of n collectives
  (``collective_gaps_s``: TensorFlow runs them one after another, each dispatched when the previous one
  ends), when a step holds more than one collective. tf-keras reduces every metric's state across the
  workers on every batch (steps_per_execution does not change that: measured), so ``--metrics minimal``
  saves from half to all of it. Where the straggler's host is held by its CPU (overheads.py: ``cpu_held``),
  a reduction's traced time is CPU of the process's threads (the op waits while gRPC and executor threads
  work), CPU that the host's other workers' compute waited for: there a step saves from half to all of its
  workers' summed collective time besides the longest, over the host's cores, when that is more (up to the
  other hosts' least wait, plus the traced saving). Measured on the README's cluster (tensor102: one worker
  on its 0.4-core budget, using 0.38): 72 ms of CPU a step saved for 15 collectives removed, 4.8 ms each,
  where the trace showed 5.4 ms each; the step 199 ms shorter, the traced reductions and gaps 112 ms. In
  another session the same traces saved 20-40 ms of CPU (its compute slowed as the other host's workers
  waited less on the same physical cores: docs/tuning.md, "The CPU-held host");
- per-step framework time: the trace's other_s (Python, dispatch, callbacks) less those gaps.
  ``steps_per_execution`` K pays it once per call of K batches, and inside the call's ``tf.range`` loop the
  next batch's forward pass, which does not wait for the previous batch's metric reductions, runs in the
  gaps between them: saved from the framework time x (1 - K0/K) (the gaps stay) through all of other_s x
  (1 - K0/K) (the prediction) to all of other_s. Measured, untraced batches at K = 8 against K = 1: 11, 10,
  41 and 38 ms saved a batch where the default's traced other_s was 10, 13, 35 and 48 ms and its framework
  part 4, 8, 22 and 31 ms (2 local workers twice, 4 local workers, the README's cluster). The trace window
  counts executions (profiler/tracewindow.py), so at K it traces up to K times the batches (``auto`` at
  K = 8: 42 of 58 instead of 10) and its capture is that much larger: the prediction adds that growth of
  the window (overheads.py: ``traced_batches``, this
  run's own window cost per traced batch; measured, 2 local workers: 1.2 s for 10 batches, 4.1-4.6 s for
  42), for ``perfkit tune`` measures traced runs. Without it, 2 local workers measured 0.89x at K = 8,
  1.12x in their untraced epoch;
- the gradient all-reduce not hidden under compute: ``max(0, transfer_s - small)``. ``bytes_per_pack``
  splits it into packs that could reduce while the backward pass still runs; each pack past the first is
  one more collective in the step's chain, at this run's cost of one (its reductions besides the longest,
  with their gaps, per collective). Predicted: that cost with nothing hidden, which is what every packed
  run measured on CPU (the exchange never overlapped compute); the range reaches up to min(exposed, 2/3 of
  busy, the backward pass's usual share), for a model whose gradients are ready early;
- waiting for the straggler: the equal-workers what-if (whatif.py) is its prediction and interval;
- input: input_s; a larger prefetch hides from none of it up to all;
- oversubscribed threads (overheads.py): a worker's busy time beyond the CPU it got, where a host runs more
  workers' threads than it has cores;
- validation: the steady epochs' validation time; validating every other epoch saves half of it;
- the trace window (overheads.py): its steps' extra time over the untraced steps of their epoch, and the
  capture's stop (the step after it, or the epoch's validation).

A step's saving s becomes the steady epoch's as ``E' = E - steps_per_epoch x s x r`` (r: the trace's own
cost taken out, as in the what-if); for the metrics and the steps per execution also ``- min(validation,
validation_steps x s)``: tf-keras' test step reduces the same metrics and runs as many batches per call,
so each validation batch saves what a training batch does (measured, 4 local workers: 0.65 s of 1.63 s of
validation an epoch with --metrics minimal). The predicted speedup is E / E'. Central figures are the
middle of each range, and the range is the interval: what it assumes is in ``basis``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from perfkit.analysis.cpu import CpuSamples
from perfkit.analysis.overheads import (CpuHeld, WindowCost, cpu_held, oversubscription, traced_batches, window_cost,
                                        worker_cores)
from perfkit.analysis.stragglers import StepSplit
from perfkit.analysis.whatif import StepModel
from perfkit.results import RunMeta, RunRecord

ADVICE_COLUMNS = ["rank", "cause", "cost_s", "cost_share", "knob", "api", "predicted_speedup", "predicted_lo",
                  "predicted_hi", "basis", "tried"]
TRY_K = 8  # steps per execution to try: 1 - 1/8 of the per-call costs go, most of what any K can take
KEPT_LO = 0.5  # --metrics minimal saves at least this share of the non-gradient collective time
TRY_PACK = 1 << 20  # bytes per pack to try: the bot detector's 1.8 MB of gradients in two packs
BACKWARD_SHARE = 2 / 3  # of a step's compute: the backward pass, during which packed reductions can run
MIN_SHARE = 0.01  # a cause costing less than this share of a steady epoch is not advice
TRACE_WINDOW = "the trace window"  # its cause's first words


def per_epoch(cause: str) -> bool:
    """Whether a cause's cost_s is seconds per steady epoch (validation, the trace window), not per step."""
    return cause == "validation" or cause.startswith(TRACE_WINDOW)


@dataclass(frozen=True)
class _Terms:
    """Per-step terms (traced seconds) and the epoch they scale into."""

    small: float
    grad: float
    other: float
    busy: float
    inp: float
    collectives: float
    gaps: float  # the reductions' share of the idle gaps of the step's chain of collectives
    epoch: float
    spe: int
    r: float
    val: float = 0.0  # validation seconds per steady epoch
    val_steps: int = 0  # validation batches per epoch (0: not recorded)

    def epoch_saving(self, per_step: float, in_validation: bool = False) -> float:
        """Seconds of the steady epoch a per-batch saving takes out; ``in_validation``: every validation
        batch saves it too (at most the validation time)."""
        val = min(self.val, self.val_steps * per_step) if in_validation and self.val > 0 else 0.0
        return self.spe * per_step * self.r + val

    def speedup(self, per_step: float, in_validation: bool = False, added: float = 0.0) -> float:
        """``added``: seconds the change adds to the steady epoch besides (a larger trace window)."""
        left = self.epoch - self.epoch_saving(per_step, in_validation) + added
        return self.epoch / left if left > 0 else math.nan


def advice_table(split: StepSplit, trace: pd.DataFrame | None, model: StepModel, row: dict[str, Any],
                 meta: RunMeta, record: RunRecord | None = None, cpu: CpuSamples | None = None,
                 window: WindowCost | None = None) -> pd.DataFrame:
    """ADVICE_COLUMNS, ranked by cost share of the steady epoch; empty for one worker or no steady epoch.
    ``record`` (the run's step records and CPU samples) adds the oversubscribed threads and the trace window;
    ``cpu``: its ``CpuSamples`` and ``window``: its ``window_cost`` when the caller has them (else taken from
    ``record`` again)."""
    epoch = float(row.get("steady_epoch_s", math.nan))
    if split.workers < 2 or not math.isfinite(epoch) or epoch <= 0:
        return pd.DataFrame(columns=ADVICE_COLUMNS)
    t = _terms(split, trace, model, epoch, meta)
    knobs = (meta.config or {}).get("knobs") or {}
    launched = bool(meta.launch)
    window = window if window is not None or record is None else window_cost(split, record)
    growth = _window_growth(window, meta, _steady_epochs(row), TRY_K)
    cores = worker_cores(record, cpu) if record is not None else None  # one pass over the CPU samples
    held = cpu_held(split, record, cores) if record is not None else None
    rows = [_reductions(t, knobs, _held_saving(split, held, t)), _framework(t, knobs, growth),
            _gradients(t, knobs, meta),
            _straggler(t, row, split), _input(t, knobs), _validation(model, epoch)]
    if record is not None:
        rows += [_oversubscribed(t, split, record, cores), _trace_window(window, epoch, _steady_epochs(row))]
    out = pd.DataFrame([r for r in rows if r is not None], columns=ADVICE_COLUMNS[1:])
    out = out[out["cost_share"] >= MIN_SHARE].sort_values("cost_share", ascending=False, ignore_index=True)
    if launched:  # a launched script's code is its own: the API line is the advice, nothing was tried
        out["knob"] = None
        out["tried"] = "not tried: change the script (api)"
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    return out[ADVICE_COLUMNS]


def _steady_epochs(row: dict[str, Any]) -> int:
    """How many epochs the steady epoch is the mean of (all after the first)."""
    epochs = row.get("epochs")
    return max(1, int(epochs) - 1) if isinstance(epochs, (int, float)) and math.isfinite(epochs) else 1


def _terms(split: StepSplit, trace: pd.DataFrame | None, model: StepModel, epoch: float, meta: RunMeta) -> _Terms:
    s = split.steps
    small = _small(s)
    grad = (s["transfer_s"] - small).clip(lower=0.0)
    other = float(trace["other_s"].mean()) if trace is not None and "other_s" in trace and not trace.empty else 0.0
    count = float(s["collectives"].median()) if "collectives" in s and s["collectives"].notna().any() else math.nan
    gaps = _mean(trace, "collective_gaps_s") * (count - 1) / count if count > 1 else 0.0
    val = model.val_now if math.isfinite(model.val_now) and model.val_now > 0 else 0.0
    return _Terms(small=float(small.mean()), grad=float(grad.mean()), other=max(0.0, other - gaps),
                  busy=float(s["busy_s"].mean()), inp=float(s["input_s"].fillna(0.0).mean()), collectives=count,
                  gaps=gaps, epoch=epoch, spe=model.steps_per_epoch, r=model.r, val=val,
                  val_steps=_validation_steps(meta))


def _small(s: pd.DataFrame) -> pd.Series:
    """Per compared step: every collective's time but the longest (0 where a table of an older parser has
    no collective_total_s)."""
    if "collective_total_s" not in s or not s["collective_total_s"].notna().any():
        return pd.Series(0.0, index=s.index)
    return (s["collective_total_s"] - s["allreduce_max_s"]).clip(lower=0.0)


def _mean(trace: pd.DataFrame | None, column: str) -> float:
    """A trace column's mean; 0 where unknown (a table of an older parser, no trace)."""
    if trace is None or column not in trace or trace[column].isna().all():
        return 0.0
    return float(trace[column].mean())


def _validation_steps(meta: RunMeta) -> int:
    """Validation batches per epoch, from the workers' recorded plan (0: not recorded)."""
    steps = [int(w.plan["validation_steps"]) for w in meta.workers
             if isinstance(w.plan, dict) and isinstance(w.plan.get("validation_steps"), int)]
    return max(steps) if steps else 0


def _ranged(t: _Terms, cause: str, cost: float, knob: str | None, api: str, lo_s: float, hi_s: float,
            basis: str, in_validation: bool = False, mid_s: float | None = None) -> dict[str, Any]:
    """A row whose saving per step lies in [lo_s, hi_s]: the prediction is ``mid_s``, else the middle."""
    mid_s = (lo_s + hi_s) / 2 if mid_s is None else mid_s
    return {"cause": cause, "cost_s": cost, "cost_share": t.epoch_saving(cost, in_validation) / t.epoch,
            "knob": knob, "api": api, "predicted_speedup": t.speedup(mid_s, in_validation),
            "predicted_lo": t.speedup(lo_s, in_validation), "predicted_hi": t.speedup(hi_s, in_validation),
            "basis": basis, "tried": "not yet"}


def _reductions(t: _Terms, knobs: dict[str, Any], held: _HeldSaving | None = None) -> dict[str, Any] | None:
    """tf-keras reduces every metric's state across the workers on every batch, inside the train function
    (measured: 16 of the bot detector's 22 collectives per step; K steps per execution keep them per batch).
    ``held``: where the straggler's host is held by its CPU, the high end of the range when it is more; the
    traced saving stays the prediction (its size there moved 1.13-1.38x between sessions, docs/tuning.md)."""
    cost = t.small + t.gaps
    if not (t.collectives > 1 and t.small > 0) or str(knobs.get("metrics", "full")) == "minimal":
        return None
    lo_s, hi_s = cost * KEPT_LO, cost
    basis = ("the dropped metrics' reductions go, the loss's and accuracy's stay: from half to all of the "
             "collective time besides the longest and its share of the gaps between the collectives "
             f"({t.gaps * 1e3:.1f} ms a step), in each training and validation batch (measured, quick "
             "preset: the metric reductions 16 -> 4 a step)")
    mid_s = (lo_s + hi_s) / 2
    if held is not None and held.hi_s > hi_s:
        hi_s, basis = held.hi_s, f"{basis}; {held.basis}"
    return _ranged(t, f"metric and loss reductions ({t.collectives - 1:.0f} collectives per step besides the "
                      "longest)", cost, "--metrics minimal",
                   "model.compile(..., metrics=['accuracy'])  # the others in evaluate() only",
                   lo_s, hi_s, basis, in_validation=True, mid_s=mid_s)


@dataclass(frozen=True)
class _HeldSaving:
    """The most the metric reductions can save per step where the straggler's host is held by its CPU."""

    hi_s: float
    basis: str


def _held_saving(split: StepSplit, held: CpuHeld | None, t: _Terms) -> _HeldSaving | None:
    """Its workers' summed collective time besides the longest (CPU of their threads, paid on the host's
    cores) over the host's cores, capped where another host's worker would stop waiting (its least wait plus
    its own traced saving)."""
    s = split.steps
    if held is None:
        return None
    mine = s[s["worker"].isin(held.workers)]
    total = float(_small(mine).groupby(mine["worker"]).mean().sum())
    if not total > 0:
        return None
    hi_s = min(held.slack_s + t.small + t.gaps, total / held.cores)
    return _HeldSaving(hi_s, (
        f"up to more where a host is held by its CPU: {held.host}'s workers used {held.used:.2f} of its "
        f"{held.cores:g} cores, so a step lasts as long as their CPU takes there, and a reduction's traced time "
        "is CPU of their threads that the host's compute waits for: at most all of its "
        f"{len(held.workers)} worker{'s' if len(held.workers) > 1 else ''}' collective time besides the longest "
        f"({total * 1e3:.0f} ms a step) over its {held.cores:g} cores"
        + (f", and the other hosts' least wait ({held.slack_s * 1e3:.0f} ms) and their own saving"
           if math.isfinite(held.slack_s) else "")
        + "; how much of it is saved moves with the load of hosts that share its cores (emulated budgets: "
        "1.13-1.38x between sessions, docs/tuning.md)"))


def _framework(t: _Terms, knobs: dict[str, Any], growth: _Growth | None = None) -> dict[str, Any] | None:
    """One tf.function call per K batches: its Python, dispatch and callback cost once per call, and the next
    batch's work in the gaps between the reductions; ``growth``: what the larger trace window adds to the
    steady epoch, None when unknown."""
    k0 = int(knobs.get("steps_per_execution", 1) or 1)
    idle = t.other + t.gaps  # the step's time with no op running
    if idle <= 0 or k0 >= TRY_K:
        return None
    gone = 1 - k0 / TRY_K
    lo_s, mid_s, hi_s = t.other * gone, idle * gone, idle
    add = growth.seconds if growth else 0.0
    window = (f"; in a traced run the trace window, which counts executions of {TRY_K} batches, traces "
              f"{growth.then} batches "
              f"instead of {growth.now}: +{add:.2f} s a steady epoch at this run's window cost per traced batch "
              f"(+{growth.least:.2f} to +{growth.most:.2f} over the workers), counted in the prediction and its "
              "range; without the trace "
              f"{t.speedup(mid_s, True):.2f}x ({t.speedup(lo_s, True):.2f}-{t.speedup(hi_s, True):.2f}x)"
              if growth else "")
    return {"cause": "per-step framework time (Python, function dispatch, callbacks)", "cost_s": t.other,
            "cost_share": t.epoch_saving(t.other, True) / t.epoch, "knob": f"--steps-per-execution {TRY_K}",
            "api": f"model.compile(..., steps_per_execution={TRY_K})",
            "predicted_speedup": t.speedup(mid_s, True, add), "predicted_lo": t.speedup(lo_s, True, add),
            "predicted_hi": t.speedup(hi_s, True, add),
            "basis": f"one call per {TRY_K} batches instead of every {k0}, in training and validation batches "
                     f"alike: the step's idle time (framework {t.other * 1e3:.1f} ms and the gaps between the "
                     f"reductions {t.gaps * 1e3:.1f} ms) once per call, since the next batch runs in those gaps "
                     "(measured: untraced batches saved about all of it); from the framework time once per call "
                     f"(the gaps stay) to all of the idle time{window}", "tried": "not yet"}


def in_combination(knob: str, parts: Sequence[str], predicted: tuple[float, float, float]
                   ) -> tuple[float, float, float]:
    """A knob's (speedup, low, high) as a part of the combination ``parts``: with ``--metrics minimal``,
    steps per execution counts its low end throughout (the framework time once per call): the rest of its
    prediction is the gaps between the metric reductions, which that change takes away with them."""
    if knob.startswith("--steps-per-execution") and any(p.startswith("--metrics minimal") for p in parts):
        return predicted[1], predicted[1], predicted[1]
    return predicted


@dataclass(frozen=True)
class _Growth:
    """What a larger trace window adds to the steady epoch: central, at most and at least (seconds), and the
    batches traced now and then."""

    seconds: float
    most: float
    least: float
    now: int
    then: int


def _window_growth(window: WindowCost | None, meta: RunMeta, steady: int, k: int) -> _Growth | None:
    """Seconds a steady epoch gains when the run is traced at ``k`` batches per execution instead of its own:
    its window's cost per traced batch (the traced steps' extra and the capture's stop, both in proportion
    to the batches traced: 0.29 MB of capture a batch at K = 1 and at K = 8) x the batches added, spread over
    the steady epochs; None where unknown."""
    cfg = meta.config or {}
    batches = max((int(w.plan["steps_per_epoch"]) for w in meta.workers
                   if isinstance(w.plan, dict) and isinstance(w.plan.get("steps_per_epoch"), int)), default=0)
    epochs = cfg.get("epochs")
    if window is None or batches <= 0 or not isinstance(epochs, int):
        return None
    spec = str(cfg.get("profile_steps") or "auto")
    k0 = int(((cfg.get("knobs") or {}).get("steps_per_execution", 1)) or 1)
    now, then = traced_batches(spec, batches, epochs, k0), traced_batches(spec, batches, epochs, k)
    if not now or then is None:
        return None
    grow = (then - now) / now / steady
    return _Growth(*(max(0.0, x) * grow for x in (window.extra_s, window.hi_s, window.lo_s)), now, then)


def _gradients(t: _Terms, knobs: dict[str, Any], meta: RunMeta) -> dict[str, Any] | None:
    """Packs of TRY_PACK bytes: each pack past the first is one more collective in the step's chain, and the
    prediction is that cost with nothing hidden (measured: 17 packed runs of the bot detector, 2 and 4 local
    workers and the README's cluster, TensorFlow 2.21 on CPU: 23 collectives a step against 22, their overlap
    with compute <= 3.5 ms a step as in the defaults); the range reaches up to all that fits in the backward
    pass, for a model whose gradients are ready early. None where the gradients fit in one pack."""
    if t.grad <= 0 or int(knobs.get("bytes_per_pack", 0) or 0) > 0:
        return None
    grad_bytes = float(meta.plan().get("params") or 0) * 4  # float32 gradients, as the all-reduce sends
    extra = math.ceil(grad_bytes / TRY_PACK) - 1 if grad_bytes > 0 else 1
    if extra < 1:
        return None
    per_collective = (t.small + t.gaps) / (t.collectives - 1) if t.collectives > 1 else 0.0
    lo_s, hideable = -extra * per_collective, min(t.grad, BACKWARD_SHARE * t.busy)
    size = f"{grad_bytes / 1e6:.1f} MB of gradients" if grad_bytes > 0 else "gradients of unknown size"
    basis = (f"{size} in {extra + 1} packs: {extra} more collective(s) a step at "
             f"{per_collective * 1e3:.1f} ms each (this run's reductions besides the longest, with their gaps), "
             "nothing hidden (measured on CPU: the packed exchange did not overlap compute); at most all that "
             "fits in the backward pass (~2/3 of compute), where the gradients are ready early")
    return _ranged(t, "the gradient all-reduce not hidden under compute", t.grad, f"--bytes-per-pack {TRY_PACK}",
                   "tf.distribute.MultiWorkerMirroredStrategy(communication_options=tf.distribute.experimental."
                   f"CommunicationOptions(bytes_per_pack={TRY_PACK}))", lo_s, hideable, basis, mid_s=lo_s)


def _straggler(t: _Terms, row: dict[str, Any], split: StepSplit) -> dict[str, Any] | None:
    wait = float(split.steps["wait_s"].mean())
    eq, lo, hi = (float(row.get(k, math.nan)) for k in ("equal_epoch_s", "equal_epoch_lo_s", "equal_epoch_hi_s"))
    if not (wait > 0 and math.isfinite(eq) and eq > 0):
        return None
    budgets = row.get("equal_budgets")
    knob = f"host budgets {budgets} (perfkit compare --verify runs it)" if budgets else None
    return {"cause": "waiting for the slowest worker", "cost_s": wait, "cost_share": t.epoch_saving(wait) / t.epoch,
            "knob": knob, "api": "give every worker the same compute (cores per worker, placement)",
            "predicted_speedup": t.epoch / eq, "predicted_lo": t.epoch / hi if hi > 0 else math.nan,
            "predicted_hi": t.epoch / lo if lo > 0 else math.nan,
            "basis": "the equal-workers what-if: every worker at the median worker's compute", "tried": "not yet"}


def _input(t: _Terms, knobs: dict[str, Any]) -> dict[str, Any] | None:
    if t.inp <= 0:
        return None
    auto = str(knobs.get("prefetch", "auto")) == "auto"
    knob = None if auto else "--prefetch auto"
    return _ranged(t, "waiting for input", t.inp, knob, "dataset.map(..., num_parallel_calls=tf.data.AUTOTUNE)"
                   ".prefetch(tf.data.AUTOTUNE)", 0.0, t.inp,
                   "a deeper or parallel pipeline hides from none to all of it" if auto else
                   "tf.data's autotuned prefetch hides from none to all of it")


def _validation(model: StepModel, epoch: float) -> dict[str, Any] | None:
    val = model.val_now
    if not (math.isfinite(val) and val > 0):
        return None
    return {"cause": "validation", "cost_s": val, "cost_share": val / epoch, "knob": None,
            "api": "model.fit(..., validation_freq=2)", "predicted_speedup": epoch / (epoch - val / 2),
            "predicted_lo": epoch / (epoch - val / 2), "predicted_hi": epoch / (epoch - val / 2),
            "basis": "validating every other epoch: half of its time per epoch (cost_s: seconds per epoch)",
            "tried": "not a perfkit option"}


def _oversubscribed(t: _Terms, split: StepSplit, record: RunRecord, cores: pd.Series | None) -> dict[str, Any] | None:
    o = oversubscription(split, record, cores)
    if o is None or o.waited_s <= 0:
        return None
    row = _ranged(t, f"oversubscribed threads ({o.hosts})", o.waited_s, None,
                  "one worker thread per core: fewer workers per host (or more cores), each pinned to its cores "
                  "(os.sched_setaffinity) with tf.config.threading.set_intra_op_parallelism_threads(1) and "
                  "set_inter_op_parallelism_threads(1)", 0.0, o.waited_s,
                  f"a worker's busy time per step ({o.busy_s * 1e3:.0f} ms) beyond the CPU it got (its mean CPU "
                  "over the training window x its step time) is time it waited for a core its host's other "
                  "workers held: from none saved (the same work on the same cores) to all of it (a core each)")
    return {**row, "tried": "not a perfkit option (a different placement)"}


def _trace_window(w: WindowCost | None, epoch: float, steady: int) -> dict[str, Any] | None:
    if w is None or w.extra_s <= 0 or w.epoch < 1:
        return None
    per_epoch = [max(0.0, x) / steady for x in (w.extra_s, w.lo_s, w.hi_s)]
    speed = [epoch / (epoch - x) if epoch > x else math.nan for x in per_epoch]
    return {"cause": f"{TRACE_WINDOW} ({w.steps} traced steps)", "cost_s": per_epoch[0],
            "cost_share": per_epoch[0] / epoch, "knob": "--profile-steps off",
            "api": "tf.keras.callbacks.TensorBoard(profile_batch=0), or profile fewer batches",
            "predicted_speedup": speed[0], "predicted_lo": speed[1], "predicted_hi": speed[2],
            "basis": f"the traced steps and the one after them (the capture stopped and written; at the "
                     "epoch's end: its validation over the other epochs') over the median "
                     f"untraced step of epoch {w.epoch}, median (range) over the workers, spread over the "
                     f"{steady} steady epoch{'s' if steady > 1 else ''}",
            "tried": "not tried: perfkit's split needs the trace"}
