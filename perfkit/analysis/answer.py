"""The verdict's first sentence, the answer to "how much faster is it, and why not faster": speedup against
the baseline, the largest cause of lost speed with its cost, and what the equal-workers what-if would give
("2 workers are 1.08x faster than one machine; worker 3 on tensor102 (0.4 core) sets the pace, costing 16%
of step time; with equal workers 1.36x"). And the what-ifs' assumptions, which the verdict no longer
carries inline: their own short section (``assumption_lines``).

The answer is for one run: the newest run with steps that is neither the baseline nor a verification run
(the run the user has just made); the others keep their own lines further down.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from perfkit.analysis.words import ok, plural, present

if TYPE_CHECKING:
    from perfkit.analysis.result import Analysis

CLEAR_STRAGGLER = 0.5  # slowest in at least this share of steps: it, not noise, sets the pace


def answered_run(a: Analysis) -> Any | None:
    """The run the answer is about (a row of ``a.runs``), or None."""
    if a.runs.empty or a.baseline_id is None:
        return None
    verifiers = set(a.verifications["verified_by"]) if "verified_by" in a.verifications else set()
    rows = [r for r in a.runs.itertuples(index=False)
            if r.run_id != a.baseline_id and r.run_id not in verifiers and ok(r.speedup)
            and not present(getattr(r, "steps_note", None))]
    return rows[-1] if rows else None


def answer_line(a: Analysis) -> str | None:
    row = answered_run(a)
    if row is None:
        return None
    base = a.runs[a.runs["run_id"] == a.baseline_id].iloc[0]
    baseline = "one machine" if base["mode"] == "single" else f"the baseline {base.run_id}"
    who = plural(int(row.workers), "worker") if row.mode != "single" else f"{row.run_id} (single)"
    verb = "is" if row.mode == "single" or row.workers == 1 else "are"
    s = float(row.speedup)
    per = " per sample" if ok(row.work_ratio) and abs(row.work_ratio - 1) > 0.01 else ""
    speed = (f"{who} {verb} {s:.2f}x faster than {baseline}{per}" if s >= 1 else
             f"{who} {verb} {1 / s:.2f}x slower than {baseline}{per} (speedup {s:.2f}x)")
    parts = [speed]
    cause = largest_cause(row, a)
    if cause:
        parts.append(cause)
    if ok(row.equal_speedup) and row.workers > 1:
        parts.append(f"with equal workers {row.equal_speedup:.2f}x")
    est = " (step split estimated from CPU-seconds)" if row.split_source == "estimate" else ""
    return "; ".join(parts) + est + f" (run {row.run_id})."


def causes(row: Any, a: Analysis) -> dict[str, float]:
    """Each cause of lost speed as its share of the workers' step time (NaN where not measured)."""
    w = a.workers[a.workers["run_id"] == row.run_id] if not a.workers.empty else a.workers
    step = float(w["step_s"].mean()) if "step_s" in w and not w.empty else math.nan
    inp = float(w["input_s"].mean()) / step if "input_s" in w and ok(step) and step > 0 else math.nan
    return {"wait": float(row.straggler_cost) if ok(row.straggler_cost) else math.nan,
            "transfer": float(row.transfer_share) if ok(row.transfer_share) else math.nan,
            "input": inp}


def largest_cause(row: Any, a: Analysis) -> str | None:
    if row.workers <= 1 or not present(row.split_source):
        return None
    known = {k: v for k, v in causes(row, a).items() if ok(v) and v > 0}
    if not known:
        return None
    name = max(known, key=known.__getitem__)
    cost = f"costing {known[name]:.0%} of step time"
    if name == "transfer":
        return f"the all-reduce not hidden under compute is the largest cost, {known[name]:.0%} of step time"
    if name == "input":
        return f"waiting for input is the largest cost, {known[name]:.0%} of step time"
    if ok(row.slowest_straggler_share) and row.slowest_straggler_share >= CLEAR_STRAGGLER:
        return f"{_worker(row, a)} sets the pace, {cost} in waits"
    return f"waiting for the slowest worker of each step is the largest cost, {known[name]:.0%} of step time"


def _worker(row: Any, a: Analysis) -> str:
    """'worker 3 on tensor102 (0.4 core)': the budget where the host has one."""
    text = f"worker {int(row.slowest_worker)} on {row.slowest_host}"
    h = a.hosts[(a.hosts["run_id"] == row.run_id) & (a.hosts["host"] == row.slowest_host)] \
        if not a.hosts.empty and "budget_cores" in a.hosts else a.hosts.iloc[0:0]
    cores = float(h["budget_cores"].iloc[0]) if not h.empty else math.nan
    emulated = ok(cores) and len(a.hosts[a.hosts["run_id"] == row.run_id]) > 1
    return text + (f" ({cores:.2g} core{'s' if cores != 1 else ''})" if emulated else "")


def assumption_lines(a: Analysis) -> list[str]:
    """What each what-if assumed, one line per run and what-if (the verdict states only their results)."""
    lines = []
    for row in a.runs.itertuples(index=False):
        if row.workers <= 1 or row.run_id == a.baseline_id:  # its what-ifs are not stated: nobody waits
            continue
        if present(getattr(row, "equal_assumptions", None)):
            lines.append(f"{row.run_id}, equal workers: {row.equal_assumptions}.")
        if present(getattr(row, "placement_assumptions", None)):
            lines.append(f"{row.run_id}, placement: {row.placement_assumptions}.")
    return lines


def advice_line(row: Any, a: Analysis) -> str | None:
    """The first piece of advice that names a change (advice/), and how many more there are."""
    from perfkit.analysis.advice.words import view

    adv = a.advice[a.advice["run_id"] == row.run_id] if not a.advice.empty else a.advice
    if adv.empty:
        return None
    adv = view(adv)
    # the what-if lines already state the straggler's remedy: the first option perfkit can run is news
    usable = adv[adv["option"].map(present)]
    # a change predicted to lose is no advice, whether perfkit can run it or the script must make it
    gaining = [c[c["predicted_speedup"].astype(float) > 1.0] for c in (usable, adv)]
    top = next(c for c in (*gaining, usable, adv) if not c.empty).iloc[0]
    change = f"try {top.knob}" if present(top.option) else f"change {top.api}"
    span = (f" ({top.predicted_lo:.2f}–{top.predicted_hi:.2f}x)"
            if ok(top.predicted_lo) and ok(top.predicted_hi) and top.predicted_hi != top.predicted_lo else "")
    more = len(adv) - 1
    rest = f"; {more} more in the advice table" if more else ""
    return (f"Advice: {top.cause} costs {top.cost_share:.0%} of a steady epoch: {change}, predicted "
            f"{top.predicted_speedup:.2f}x{span} ({top.tried}){rest}.")
