"""One function per cause of lost speed: what it costs this run and what a change would save, as an
``Advice`` (None where the run shows no such cost). The reasoning and what each range assumes:
docs/figures.md, "Advice"; the measurements behind them: docs/tuning.md."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from perfkit.analysis.advice.records import PROFILE_STEPS, Advice, CauseKind, Change, Prediction, Tried
from perfkit.analysis.advice.terms import Growth, Terms, small_collectives
from perfkit.analysis.overheads import CpuHeld, WindowCost, oversubscription
from perfkit.analysis.stragglers import StepSplit
from perfkit.analysis.whatif import StepModel
from perfkit.results import RunMeta, RunRecord

TRY_K = 8  # steps per execution to try: 1 - 1/8 of the per-call costs go, most of what any K can take
KEPT_LO = 0.5  # --metrics minimal saves at least this share of the non-gradient collective time
TRY_PACK = 1 << 20  # bytes per pack to try: the bot detector's gradients in two packs
BACKWARD_SHARE = 2 / 3  # of a step's compute: the backward pass, during which packed reductions can run


def _ranged(t: Terms, kind: CauseKind, cost: float, change: Change | None, api: str, lo_s: float, hi_s: float,
            basis: str, in_validation: bool = False, mid_s: float | None = None, **extra: Any) -> Advice:
    """A piece whose saving per step lies in [lo_s, hi_s]: the prediction is ``mid_s``, else the middle."""
    mid_s = (lo_s + hi_s) / 2 if mid_s is None else mid_s
    predicted = Prediction(t.speedup(mid_s, in_validation), t.speedup(lo_s, in_validation),
                           t.speedup(hi_s, in_validation))
    return Advice(kind, cost, t.epoch_saving(cost, in_validation) / t.epoch, change, api, predicted, basis, **extra)


def reductions(t: Terms, knobs: dict[str, Any], held: HeldSaving | None = None) -> Advice | None:
    """tf-keras reduces every metric's state across the workers on every batch, inside the train function
    (K steps per execution keep them per batch). ``held``: where the straggler's host is held by its CPU, the
    high end of the range when it is more; the traced saving stays the prediction."""
    cost = t.small + t.gaps
    if not (t.collectives > 1 and t.small > 0) or str(knobs.get("metrics", "full")) == "minimal":
        return None
    lo_s, hi_s = cost * KEPT_LO, cost
    basis = ("the dropped metrics' reductions go, the loss's and accuracy's stay: from half to all of the "
             "collective time besides the longest and its share of the gaps between the collectives "
             f"({t.gaps * 1e3:.1f} ms a step), in each training and validation batch")
    mid_s = (lo_s + hi_s) / 2
    if held is not None and held.hi_s > hi_s:
        hi_s, basis = held.hi_s, f"{basis}; {held.basis}"
    return _ranged(t, CauseKind.REDUCTIONS, cost, Change("metrics", "minimal"),
                   "model.compile(..., metrics=['accuracy'])  # the others in evaluate() only",
                   lo_s, hi_s, basis, in_validation=True, mid_s=mid_s, detail=int(round(t.collectives - 1)))


@dataclass(frozen=True)
class HeldSaving:
    """The most the metric reductions can save per step where the straggler's host is held by its CPU."""

    hi_s: float
    basis: str


def held_saving(split: StepSplit, held: CpuHeld | None, t: Terms) -> HeldSaving | None:
    """Its workers' summed collective time besides the longest (CPU of their threads, paid on the host's
    cores) over the host's cores, capped where another host's worker would stop waiting (its least wait plus
    its own traced saving)."""
    s = split.steps
    if held is None:
        return None
    mine = s[s["worker"].isin(held.workers)]
    total = float(small_collectives(mine).groupby(mine["worker"]).mean().sum())
    if not total > 0:
        return None
    hi_s = min(held.slack_s + t.small + t.gaps, total / held.cores)
    return HeldSaving(hi_s, (
        f"up to more where a host is held by its CPU: {held.host}'s workers used {held.used:.2f} of its "
        f"{held.cores:g} cores, so a step lasts as long as their CPU takes there, and a reduction's traced time "
        "is CPU of their threads that the host's compute waits for: at most all of its "
        f"{len(held.workers)} worker{'s' if len(held.workers) > 1 else ''}' collective time besides the longest "
        f"({total * 1e3:.0f} ms a step) over its {held.cores:g} cores"
        + (f", and the other hosts' least wait ({held.slack_s * 1e3:.0f} ms) and their own saving"
           if math.isfinite(held.slack_s) else "")
        + "; how much of it is saved moves with the load of hosts that share its cores"))


def framework(t: Terms, knobs: dict[str, Any], growth: Growth | None = None) -> Advice | None:
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
              f"{growth.then} batches instead of {growth.now}: +{add:.2f} s a steady epoch at this run's window "
              f"cost per traced batch (+{growth.least:.2f} to +{growth.most:.2f} over the workers), counted in "
              f"the prediction and its range; without the trace {t.speedup(mid_s, True):.2f}x "
              f"({t.speedup(lo_s, True):.2f}-{t.speedup(hi_s, True):.2f}x)" if growth else "")
    basis = (f"one call per {TRY_K} batches instead of every {k0}, in training and validation batches alike: the "
             f"step's idle time (framework {t.other * 1e3:.1f} ms and the gaps between the reductions "
             f"{t.gaps * 1e3:.1f} ms) once per call, since the next batch runs in those gaps; from the framework "
             f"time once per call (the gaps stay) to all of the idle time{window}")
    predicted = Prediction(t.speedup(mid_s, True, add), t.speedup(lo_s, True, add), t.speedup(hi_s, True, add))
    return Advice(CauseKind.FRAMEWORK, t.other, t.epoch_saving(t.other, True) / t.epoch,
                  Change("steps_per_execution", TRY_K), f"model.compile(..., steps_per_execution={TRY_K})",
                  predicted, basis)


def gradients(t: Terms, knobs: dict[str, Any], meta: RunMeta) -> Advice | None:
    """Packs of TRY_PACK bytes: each pack past the first is one more collective in the step's chain, and the
    prediction is that cost with nothing hidden (as every packed run on CPU measured); the range reaches up
    to all that fits in the backward pass, for a model whose gradients are ready early. None where the
    gradients fit in one pack."""
    if t.grad <= 0 or int(knobs.get("bytes_per_pack", 0) or 0) > 0:
        return None
    grad_bytes = float(meta.plan().params or 0) * 4  # float32 gradients, as the all-reduce sends
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
    return _ranged(t, CauseKind.GRADIENTS, t.grad, Change("bytes_per_pack", TRY_PACK),
                   "tf.distribute.MultiWorkerMirroredStrategy(communication_options=tf.distribute.experimental."
                   f"CommunicationOptions(bytes_per_pack={TRY_PACK}))", lo_s, hideable, basis, mid_s=lo_s)


def straggler(t: Terms, row: dict[str, Any], split: StepSplit) -> Advice | None:
    """The equal-workers what-if is its prediction and interval, the host budgets that would make it its
    change (``perfkit compare --verify`` runs it)."""
    wait = float(split.steps["wait_s"].mean())
    eq, lo, hi = (float(row.get(k, math.nan)) for k in ("equal_epoch_s", "equal_epoch_lo_s", "equal_epoch_hi_s"))
    if not (wait > 0 and math.isfinite(eq) and eq > 0):
        return None
    budgets = row.get("equal_budgets")
    predicted = Prediction(t.epoch / eq, t.epoch / hi if hi > 0 else math.nan, t.epoch / lo if lo > 0 else math.nan)
    return Advice(CauseKind.STRAGGLER, wait, t.epoch_saving(wait) / t.epoch, None,
                  "give every worker the same compute (cores per worker, placement)", predicted,
                  "the equal-workers what-if: every worker at the median worker's compute",
                  detail=str(budgets) if isinstance(budgets, str) and budgets else None)


def waiting_for_input(t: Terms, knobs: dict[str, Any]) -> Advice | None:
    if t.inp <= 0:
        return None
    auto = str(knobs.get("prefetch", "auto")) == "auto"
    return _ranged(t, CauseKind.INPUT, t.inp, None if auto else Change("prefetch", "auto"),
                   "dataset.map(..., num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)", 0.0, t.inp,
                   "a deeper or parallel pipeline hides from none to all of it" if auto else
                   "tf.data's autotuned prefetch hides from none to all of it",
                   tried=Tried.NOT_AN_OPTION if auto else Tried.NOT_YET)


def validation(model: StepModel, epoch: float) -> Advice | None:
    val = model.val_now
    if not (math.isfinite(val) and val > 0):
        return None
    half = epoch / (epoch - val / 2)
    return Advice(CauseKind.VALIDATION, val, val / epoch, None, "model.fit(..., validation_freq=2)",
                  Prediction(half, half, half),
                  "validating every other epoch: half of its time per epoch (cost_s: seconds per epoch)",
                  Tried.NOT_AN_OPTION)


def oversubscribed(t: Terms, split: StepSplit, record: RunRecord, cores: pd.Series | None) -> Advice | None:
    o = oversubscription(split, record, cores)
    if o is None or o.waited_s <= 0:
        return None
    return _ranged(t, CauseKind.OVERSUBSCRIBED, o.waited_s, None,
                   "one worker thread per core: fewer workers per host (or more cores), each pinned to its cores "
                   "(os.sched_setaffinity) with tf.config.threading.set_intra_op_parallelism_threads(1) and "
                   "set_inter_op_parallelism_threads(1)", 0.0, o.waited_s,
                   f"a worker's busy time per step ({o.busy_s * 1e3:.0f} ms) beyond the CPU it got (its mean CPU "
                   "over the training window x its step time) is time it waited for a core its host's other "
                   "workers held: from none saved (the same work on the same cores) to all of it (a core each)",
                   tried=Tried.PLACEMENT, detail=o.hosts)


def trace_window(w: WindowCost | None, epoch: float, steady: int) -> Advice | None:
    if w is None or w.extra_s <= 0 or w.epoch < 1:
        return None
    per_epoch = [max(0.0, x) / steady for x in (w.extra_s, w.lo_s, w.hi_s)]
    speed = [epoch / (epoch - x) if epoch > x else math.nan for x in per_epoch]
    basis = (f"the traced steps and the one after them (the capture stopped and written; at the epoch's end: its "
             f"validation over the other epochs') over the median untraced step of epoch {w.epoch}, median "
             f"(range) over the workers, spread over the {steady} steady epoch{'s' if steady > 1 else ''}")
    return Advice(CauseKind.TRACE_WINDOW, per_epoch[0], per_epoch[0] / epoch, Change(PROFILE_STEPS, "off"),
                  "tf.keras.callbacks.TensorBoard(profile_batch=0), or profile fewer batches",
                  Prediction(*speed), basis, Tried.NEEDS_TRACE, int(w.steps))
