"""The verdict: plain sentences generated from an Analysis's numbers.

Each sentence is written only when the figure it states exists (a NaN figure means no sentence), and a
figure that is an estimate says so in its sentence.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from perfkit.analysis.account import command_waterfall_line, goodput_line, waterfall_line
from perfkit.analysis.answer import advice_line, answer_line
from perfkit.analysis.command import STEP_FIGURES
from perfkit.analysis.stragglers import FLAG_BELOW
from perfkit.analysis.verify import verification_lines
from perfkit.analysis.words import estimated as _estimated
from perfkit.analysis.words import num, ok, present

if TYPE_CHECKING:
    from perfkit.analysis.result import Analysis


def verdict(a: Analysis) -> list[str]:
    """The answer first (``answer.answer_line``), then the baseline and each run's details."""
    answer = answer_line(a)
    lines = ([answer] if answer else []) + command_lines(a) + _baseline_lines(a)
    base = a.runs[a.runs["run_id"] == a.baseline_id].iloc[0] if a.baseline_id else None
    for row in a.runs.itertuples(index=False):
        if row.run_id != a.baseline_id:
            lines += run_lines(row, base, a)
    lines += mode_lines(a.modes)
    lines += verification_lines(a.verifications)
    if not a.excluded.empty:
        lines.append(f"Left out {len(a.excluded)} run(s): " + "; ".join(
            f"{e.run_id} ({e.reason})" for e in a.excluded.itertuples(index=False)) + ".")
    return lines


def _baseline_lines(a: Analysis) -> list[str]:
    if a.runs.empty:
        return ["No run could be analysed."]
    if a.baseline_id is None:
        return [f"No baseline ({a.baseline_note}): speedup, efficiency and the gaps to the baseline are not "
                f"computed."]
    b = a.runs[a.runs["run_id"] == a.baseline_id].iloc[0]
    parts = [f"steady epoch {b.steady_epoch_s:.1f} s" if ok(b.steady_epoch_s) else
             f"no steps, whole command {num(b.command_wall_s)} s" if _stepless(b) and ok(b.command_wall_s) else
             "no epoch time",
             f"{b.steady_samples_per_s:,.0f} samples/s" if ok(b.steady_samples_per_s) else None,
             f"{num(b.cpu_s_per_1k_samples)} CPU-seconds per 1,000 samples" if ok(b.cpu_s_per_1k_samples) else None]
    text = f"Baseline: {b.run_id} ({b['mode']}, {a.baseline_note}): " + ", ".join(p for p in parts if p)
    return [text + _cpu_per_process(a, b.run_id) + "." + window_note(b), goodput_line(b.run_id, a.goodput)]


def window_note(row: Any) -> str:
    """What perfkit's own trace window cost this run, where it could be measured."""
    cost, epoch = getattr(row, "trace_window_s", None), getattr(row, "trace_window_epoch", None)
    if not ok(cost) or not ok(epoch):
        return ""
    if cost < 0.005:
        return (f" perfkit's trace window cost nothing measurable in epoch {int(epoch)} (its steps ran no slower "
                "than that epoch's median).")
    steady = getattr(row, "steady_epoch_s", None)
    share = f" ({cost / steady:.0%} of a steady epoch)" if ok(steady) and steady > 0 else ""
    return (f" perfkit's trace window added {cost:.2f} s to epoch {int(epoch)}{share}; --profile-steps off "
            "leaves it out.")


def _cpu_per_process(a: Analysis, run_id: str) -> str:
    w = a.workers[a.workers["run_id"] == run_id] if not a.workers.empty else a.workers
    if w.empty or "cpu_mean" not in w or not w["cpu_mean"].notna().any():
        return ""
    lo, hi = w["cpu_mean"].min(), w["cpu_mean"].max()
    span = f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f}%"
    if len(w) == 1:
        return f"; its process used {span} CPU on average (100% = one core)"
    return f"; each worker process used {span} CPU on average (100% = one core)"


def run_lines(row: Any, base: Any, a: Analysis) -> list[str]:
    if _stepless(row):  # its speed and why it has no steps open the verdict (command_lines)
        return _command_cpu_lines(row, base, a) + _cpu_lines(row, base, a)
    note = str(row.split_note)
    est = "" if row.split_source == "trace" else note[:1].upper() + note[1:]
    lines = [_speed_line(row, base) + window_note(row), goodput_line(row.run_id, a.goodput)]
    if row.mode == "ps":
        lines += _async_lines(row)
    elif present(row.split_source) and row.workers > 1:  # one worker: nobody to wait for
        lines += _straggler_lines(row, a, est)
        lines += _network_lines(row, est)
        lines += _what_if_lines(row, base, a, est)
        lines.append(waterfall_line(row, a.waterfall))
        lines.append(command_waterfall_line(row, a.waterfall))
        lines.append(advice_line(row, a) or "")
    elif row.workers > 1:
        lines.append(f"Stragglers and the what-if are not computed ({row.split_note}).")
    lines += _cpu_lines(row, base, a)
    lines.append(_convergence_line(row, base))
    return [line for line in lines if line]


def _async_lines(row: Any) -> list[str]:
    """ParameterServerStrategy: nobody waits; a slower worker shows as a smaller share of the steps."""
    if not present(row.step_shares) or not ok(row.min_share_vs_even):
        return []
    even = 1 / row.workers
    low = int(row.min_share_worker)
    text = (f"Asynchronous training ({row.workers} workers, {int(row.ps)} parameter server"
            f"{'s' if row.ps != 1 else ''}): no worker waited for another; each worker's share of the steps: "
            f"{row.step_shares}.")
    if present(getattr(row, "workers_died", None)) and str(low) in str(row.workers_died).replace(",", " ").split():
        text += f" Worker {low} ran {row.min_step_share:.0%} of them: it died during the run."
    elif row.min_share_vs_even < 0.9:
        text += (f" Worker {low} ran {row.min_step_share:.0%} of them ({row.min_share_vs_even:.2f}x an even share "
                 f"of {even:.0%}): the slower worker ran fewer steps instead of holding the others back.")
    else:
        text += f" Every worker ran close to an even share ({even:.0%}): none was clearly slower."
    return [text, *_lost_lines(row)]


def _lost_lines(row: Any) -> list[str]:
    """A worker that died while the run went on: the figures are of a cluster that lost it."""
    if not present(getattr(row, "workers_died", None)):
        return []
    lost = (f"; {int(row.steps_lost)} step{'s' if row.steps_lost != 1 else ''} failed on it and ran again on "
            f"another worker") if ok(row.steps_lost) else ""
    return [f"Worker(s) {row.workers_died} died during the run and TensorFlow's coordinator went on without "
            f"them{lost}: these figures are of a cluster that lost a worker, not of the {row.workers} it started with."]


def mode_lines(modes: pd.DataFrame) -> list[str]:
    """Synchronous (multi) against asynchronous (ps) training on the same data: faster, and at what cost."""
    if modes.empty or not {"multi", "ps"} <= set(modes["mode"]):
        return []
    m = modes[modes["mode"] == "multi"].iloc[0]
    p = modes[modes["mode"] == "ps"].iloc[0]
    if not ok(p.epoch_ratio_vs_multi):
        return []
    r = float(p.epoch_ratio_vs_multi)
    speed = f"{r:.2f}x faster" if r >= 1 else f"{1 / r:.2f}x slower"
    vs_base = (f"; speedup over the baseline {p.speedup:.2f}x against {m.speedup:.2f}x"
               if ok(p.speedup) and ok(m.speedup) else "")
    text = (f"Synchronous against asynchronous training on this cluster: {p.run_id} (ps, ParameterServerStrategy) "
            f"ran a steady epoch in {p.steady_epoch_s:.1f} s against {m.steady_epoch_s:.1f} s for {m.run_id} (multi, "
            f"MultiWorkerMirroredStrategy): {speed}{vs_base}.")
    gap = p.val_accuracy_vs_multi
    if not ok(gap):
        return [text + " No validation accuracy to compare."]
    acc = f"validation accuracy after the last epoch {p.val_accuracy:.4f} against {m.val_accuracy:.4f}"
    cost = (f"at an accuracy cost of {-gap:.4f} ({acc})" if gap < 0 else f"with no accuracy cost ({acc}, {gap:+.4f})")
    if r >= 1.05:
        return [text + f" Asynchronous training beat synchronous by {r - 1:.0%} per epoch {cost}."]
    if r > 1 / 1.05:
        return [text + f" Neither beat the other by more than 5% per epoch; asynchronous training ran {cost}."]
    return [text + f" Asynchronous training did not beat synchronous: its epochs took {1 / r - 1:.0%} longer, {cost}."]


def _convergence_line(row: Any, base: Any) -> str:
    if not ok(row.val_accuracy):
        return ""
    if base is None or not ok(base.val_accuracy):
        auc = f", AUC {row.val_auc:.4f}" if ok(row.val_auc) else ""
        return f"Validation after the last epoch: accuracy {row.val_accuracy:.4f}{auc}."
    auc = (f", AUC {row.val_auc:.4f} vs {base.val_auc:.4f} ({row.val_auc_gap:+.4f})"
           if ok(row.val_auc) and ok(base.val_auc) else "")
    return (f"Validation after the last epoch: accuracy {row.val_accuracy:.4f} vs {base.val_accuracy:.4f} "
            f"for the baseline ({row.val_accuracy_gap:+.4f}){auc}.")


def _speed_line(row: Any, base: Any) -> str:
    who = f"{row.run_id} ({row.mode}, {row.workers} worker{'s' if row.workers != 1 else ''})"
    warm = " Only one epoch was run, so its time includes the warm-up." if row.steady_is_warmup else ""
    if base is None or not ok(row.speedup):
        if not ok(row.steady_epoch_s):
            return f"{who}: no epoch time was recorded."
        rate = f", {row.steady_samples_per_s:,.0f} samples/s" if ok(row.steady_samples_per_s) else ""
        return f"{who}: steady epoch {row.steady_epoch_s:.1f} s{rate}.{warm}"
    times = f"steady epoch {row.steady_epoch_s:.1f} s vs {base.steady_epoch_s:.1f} s"
    if ok(row.work_ratio) and abs(row.work_ratio - 1) > 0.01:
        times += (f", each of {row.steady_epoch_samples:,.0f} samples vs {base.steady_epoch_samples:,.0f}, "
                  f"so speedup per sample")
    fit = f", fit {row.speedup_fit:.2f}x" if ok(row.speedup_fit) else ""
    if row.speedup >= 1:
        return (f"{who} is {row.speedup:.2f}x faster than {base.run_id} (scaling efficiency {row.efficiency:.0%}; "
                f"{times}{fit}).{warm}")
    return (f"{who} is {1 / row.speedup:.2f}x slower than {base.run_id}: speedup {row.speedup:.2f}x, scaling "
            f"efficiency {row.efficiency:.0%} ({times}{fit}).{warm}")


def _straggler_lines(row: Any, a: Analysis, est: str) -> list[str]:
    if not ok(row.slowest_speed_score):
        return []
    slow = int(row.slowest_worker)
    cost = f" Waiting cost {row.straggler_cost:.0%} of all worker step time." if ok(row.straggler_cost) else ""
    others = (f"; the other workers spent {row.others_wait_share:.0%} of each step waiting for it"
              if ok(row.others_wait_share) else "")
    who = f"Worker {slow} on {row.slowest_host} was the slowest in {row.slowest_straggler_share:.0%} of steps"
    if row.slowest_speed_score < FLAG_BELOW:
        more = [int(x) for x in str(row.flagged_workers or "").split() if int(x) != slow]
        also = f" Also flagged (speed score < {FLAG_BELOW}): worker(s) {', '.join(map(str, more))}." if more else ""
        return [_estimated(f"{who} (speed score {row.slowest_speed_score:.2f}){others}.", est) + cost + also]
    w = a.workers[a.workers["run_id"] == row.run_id]
    low = w.loc[w["speed_score"].idxmin()]
    if ok(row.slowest_straggler_share) and row.slowest_straggler_share >= 0.5 and row.slowest_speed_score < 0.9:
        # A clearly slower worker that sets the pace of most synchronous steps is the straggler, flagged
        # or not (equal workers take turns being "slowest" by noise, and are never named).
        return [_estimated(f"The straggler is worker {slow} on {row.slowest_host}: the slowest in "
                           f"{row.slowest_straggler_share:.0%} of steps (speed score {row.slowest_speed_score:.2f}, "
                           f"not below the {FLAG_BELOW} flag){others}.", est) + cost]
    return [_estimated(f"No worker is flagged as a straggler (speed score < {FLAG_BELOW}; lowest "
                       f"{low.speed_score:.3f}, worker {int(low.worker)}). {who}{others}.", est) + cost]


def _network_lines(row: Any, est: str) -> list[str]:
    """When moving gradients costs more than any other part of a step, the network is what to fix."""
    if getattr(row, "largest_term", None) != "transfer" or not ok(row.transfer_share):
        return []
    links = f" (links: {row.links})" if present(getattr(row, "links", None)) else ""
    return [_estimated(f"The network between the workers sets the pace: the gradient all-reduce (transfer) is the "
                       f"largest term of a step, {row.transfer_share:.0%} of the workers' mean step time{links}. "
                       f"A faster link, fewer synchronisations (a larger batch per step) or smaller gradients "
                       f"would help more than faster workers.", est)]


def _what_if_lines(row: Any, base: Any, a: Analysis, est: str) -> list[str]:
    lines = []
    if ok(row.equal_epoch_s):
        vs = f" (~{row.equal_speedup:.2f}x the baseline)" if base is not None and ok(row.equal_speedup) else ""
        span = (f", 95% interval {row.equal_epoch_lo_s:.1f}–{row.equal_epoch_hi_s:.1f} s"
                if ok(row.equal_epoch_lo_s) and ok(row.equal_epoch_hi_s) else "")
        realise = f"; budgets that would realise it: {row.equal_budgets}" if present(row.equal_budgets) else ""
        lines.append(_estimated(f"With equal workers (all at the median worker's speed) a steady epoch would take "
                                f"~{row.equal_epoch_s:.1f} s{span} instead of {row.steady_epoch_s:.1f} s{vs}"
                                f"{realise}.", est))
    if present(row.placement_proposed):
        lines.append(_placement_line(row, a, est))
    return lines


def _placement_line(row: Any, a: Analysis, est: str) -> str:
    p = a.placement[a.placement["run_id"] == row.run_id]
    shares = ":".join(f"{x:.1f}" for x in p["workers_proportional"])
    hosts = row.placement_hosts
    if row.placement_proposed == row.placement_now:
        return _estimated(f"The placement {row.placement_now} ({hosts}) already matches measured host speed "
                          f"(proportional shares {shares}).", est)
    empty = [str(h) for h, n in zip(p["host"], p["workers_proposed"]) if n == 0]
    none = f" {', '.join(empty)} would get no worker." if empty else ""
    cut = (f" would cut the slowest worker's compute per step from ~{row.compute_now_s:.2f} s to "
           f"~{row.compute_proposed_s:.2f} s" if ok(row.compute_now_s) and ok(row.compute_proposed_s) else "")
    epoch = getattr(row, "placement_epoch_s", math.nan)
    if ok(epoch):
        cut += (f" and a steady epoch to ~{epoch:.1f} s (95% interval {row.placement_epoch_lo_s:.1f}–"
                f"{row.placement_epoch_hi_s:.1f} s)")
    return _estimated(f"Placing workers {row.placement_proposed} ({hosts}) by measured host speed instead of "
                      f"{row.placement_now} (proportional shares {shares}){cut}, if each host's measured "
                      f"throughput is shared by its workers (otherwise as the equal-workers what-if "
                      f"assumes).", est) + none


def _cpu_lines(row: Any, base: Any, a: Analysis) -> list[str]:
    lines = []
    if ok(row.cpu_s_per_1k_samples):
        vs = (f" vs {num(base.cpu_s_per_1k_samples)} for the baseline ({row.cpu_cost_vs_baseline:.2f}x)"
              if base is not None and ok(row.cpu_cost_vs_baseline) else "")
        lines.append(f"CPU cost: {num(row.cpu_s_per_1k_samples)} CPU-seconds per 1,000 samples{vs}"
                     f"{_cpu_per_process(a, row.run_id)}.")
    h = a.hosts[(a.hosts["run_id"] == row.run_id)] if not a.hosts.empty else a.hosts
    h = h[h["budget_share_mean"].notna()] if not h.empty else h
    if not h.empty:
        lines.append(_budget_mark(h) + "Host CPU against its budget (mean): " + ", ".join(
            f"{r.host} {r.cpu_mean:.0f}% of {r.budget_cores * 100:.0f}% ({r.budget_share_mean:.0%})"
            for r in h.itertuples(index=False)) + "." + _budget_differs(h))
    return lines


def _budget_mark(h: pd.DataFrame) -> str:
    if "budget_enforced" in h and not h["budget_enforced"].astype(bool).all():
        return "Budgets NOT enforced (--allow-unenforced; each figure against a budget is only what was asked): "
    return ""


def _budget_differs(h: pd.DataFrame) -> str:
    """The applied budget (read back from the workers) where it is not the one asked for."""
    if "budget_requested_cores" not in h:
        return ""
    off = [r for r in h.itertuples(index=False) if ok(r.budget_requested_cores) and ok(r.budget_cores)
           and abs(r.budget_cores - r.budget_requested_cores) > 0.1 * r.budget_requested_cores]
    if not off:
        return ""
    return " Applied budgets differ from the request: " + ", ".join(
        f"{r.host} {num(r.budget_cores)} cores given vs {num(r.budget_requested_cores)} asked" for r in off) + "."


def _stepless(row: Any) -> bool:
    return present(getattr(row, "steps_note", None))


def _who(row: Any) -> str:
    return f"{row.run_id} ({row.mode}, {row.workers} worker{'s' if row.workers != 1 else ''})"


def command_lines(a: Analysis) -> list[str]:
    """When a run recorded no steps, the verdict opens with the whole command's speedup (the one speed
    figure such a run has) and then says why its step figures are missing."""
    if a.runs.empty or "steps_note" not in a.runs or not a.runs["steps_note"].map(present).any():
        return []
    base = a.runs[a.runs["run_id"] == a.baseline_id].iloc[0] if a.baseline_id else None
    rows = [r for r in a.runs.itertuples(index=False) if r.run_id != a.baseline_id
            and (_stepless(r) or (base is not None and _stepless(base)))]
    lines = [_command_speed_line(r, base, a.baseline_note) for r in rows]
    missing = a.runs[a.runs["steps_note"].map(present)]
    note = str(missing["steps_note"].iloc[0])
    them = "it" if len(missing) == 1 else "them"
    lines.append(f"No steps in {', '.join(missing['run_id'])}: {note}; {STEP_FIGURES} are not computed for "
                 f"{them}.")
    return lines


def _command_speed_line(row: Any, base: Any, baseline_note: str) -> str:
    wall = "wall time from the workers' start to the last one's exit"
    if not ok(row.command_wall_s):
        return f"{_who(row)}: no command wall time (run.json has no start or end time)."
    if base is None or not ok(row.command_speedup):
        why = f"no baseline ({baseline_note})" if base is None else "the baseline has no command wall time"
        return f"{_who(row)} ran the whole command in {num(row.command_wall_s)} s ({wall}); {why}, so no speedup."
    s = float(row.command_speedup)
    how = f"{s:.2f}x faster than" if s >= 1 else f"{1 / s:.2f}x slower than"
    return (f"{_who(row)} ran the whole command {how} the baseline {base.run_id} ({base['mode']}): command "
            f"speedup {s:.2f}x ({num(row.command_wall_s)} s vs {num(base.command_wall_s)} s, {wall}).")


def _command_cpu_lines(row: Any, base: Any, a: Analysis) -> list[str]:
    """A run without steps: its workers' CPU and memory over the command's whole life."""
    if not ok(row.command_cpu_s):
        return []
    vs = (f" vs {num(base.command_cpu_s)} for the baseline ({row.command_cpu_s / base.command_cpu_s:.2f}x)"
          if base is not None and row.run_id != base.run_id and ok(base.command_cpu_s) and base.command_cpu_s > 0
          else "")
    rss = f"; peak RSS {row.rss_peak_max_bytes / 2**20:,.0f} MiB" if ok(row.rss_peak_max_bytes) else ""
    text = (f"{row.run_id} over the whole command: {num(row.command_cpu_s)} CPU-seconds of its worker processes"
            f"{vs}{_cpu_per_process(a, row.run_id)}{rss}.")
    return [text]
