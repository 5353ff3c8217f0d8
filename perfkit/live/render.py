"""A ``Snapshot`` drawn three ways: a table for the terminal (rich), one plain line for logs and CI, one JSON
object a line for other tools."""

from __future__ import annotations

import json
import math

from rich.console import Group
from rich.table import Table
from rich.text import Text

from perfkit.live.snapshot import RunState, Snapshot, WorkerRow


def headline(s: Snapshot) -> str:
    """The run in one line: its state, pace, speedup, the worker the others wait for, ETA."""
    if s.state is RunState.FINISHED:
        return f"{s.run_id} has finished ({s.status}): perfkit analyze {s.run_id}"
    if s.state is RunState.NOT_UPDATED:
        return (f"{s.run_id} not updated for {s.age_s:.0f} s: run.json says running, but no worker has written "
                f"since (its launcher stopped?)")
    parts = [f"{s.run_id} running {_secs(s.elapsed_s)}"]
    if not s.workers:  # before the workers start (each writes its status as it starts)
        return parts[0] + ": no worker has written its status yet"
    if s.epoch is not None:
        parts.append(f"epoch {s.epoch + 1}" + (f"/{s.epochs}" if s.epochs else ""))
    if s.samples_per_s is not None:
        parts.append(f"{s.samples_per_s:,.0f} samples/s")
    if s.speedup is not None:
        parts.append(f"{s.speedup:.2f}x {s.baseline_id}")
    parts.append(_slowest(s))
    if s.eta_s is not None:
        parts.append(f"ETA {_secs(s.eta_s)}")
    return ", ".join(parts)


def _slowest(s: Snapshot) -> str:
    alarms = [r for r in s.workers if r.state.alarming]
    if alarms:  # a stopped or stuck worker holds every step: it, not a CPU share, is what the others wait for
        return "; ".join(f"worker {r.index} ({r.host}) {r.state.value}" + (f" {r.where}" if r.where else "")
                         for r in alarms) + ": the others wait for it"
    w = s.slowest
    if w is None:
        return "no worker held the others back"
    wait = f", {w.wait_s_per_step * 1000:.0f} ms a step" if w.wait_s_per_step is not None else ""
    return f"the others wait for worker {w.worker} ({w.host}): {w.others_wait_share:.0%} of their step{wait}"


def worker_text(r: WorkerRow) -> str:
    at = f"e{r.epoch + 1}" if r.epoch is not None else "e-"
    at += f" s{r.step + 1}" if r.step is not None else ""
    state = r.state.value + (f" {r.where}" if r.where and r.state.alarming else "")
    return (f"w{r.index} {r.host} {state} {at} {_num(r.steps_per_s, '.1f')} st/s cpu "
            f"{_num(r.cpu_percent, '.0f')}%+{_num(r.cpu_wait_percent, '.0f')}% waiting/{_budget(r)}")


def plain_line(s: Snapshot) -> str:
    """``--plain``: the headline, then each worker, on one line."""
    if s.state is not RunState.RUNNING:
        return headline(s)
    return headline(s) + " | " + "; ".join(worker_text(r) for r in s.workers)


def json_line(s: Snapshot) -> str:
    return json.dumps(s.to_dict(), separators=(",", ":"), allow_nan=False, default=str)


def view(s: Snapshot, hint: bool = True) -> Group:
    """The terminal view: the headline above a table of the workers (``hint``: how to leave, below)."""
    t = Table(show_edge=False, pad_edge=False, header_style="bold")
    for name, right in (("worker", False), ("host", False), ("state", False), ("epoch", True), ("step", True),
                        ("steps/s", True), ("CPU", True), ("waiting", True), ("budget", True), ("RSS", True),
                        ("beat", True)):
        t.add_column(name, justify="right" if right else "left", no_wrap=True)
    for r in s.workers:
        slow = s.slowest is not None and s.slowest.worker == r.index
        state = Text(r.state.value + (f" {r.where}" if r.where and r.state.alarming else ""),
                     style="bold red" if r.state.alarming else "")
        t.add_row(Text(f"{r.index}" + (" (slowest)" if slow else ""), style="bold yellow" if slow else ""),
                  r.host, state, _num(None if r.epoch is None else r.epoch + 1, "d"),
                  _num(None if r.step is None else r.step + 1, "d"), _num(r.steps_per_s, ".1f"),
                  _num(r.cpu_percent, ".0f") + ("%" if r.cpu_percent is not None else ""),
                  _num(r.cpu_wait_percent, ".0f") + ("%" if r.cpu_wait_percent is not None else ""), _budget(r),
                  _num(None if r.rss_bytes is None else r.rss_bytes / 2**20, ".0f") + (" MiB" if r.rss_bytes else ""),
                  _num(r.beat_age_s, ".0f") + (" s" if r.beat_age_s is not None else ""))
    leave = [Text("q or Ctrl-C leaves; the run goes on", style="dim")] if hint else []
    return Group(Text(headline(s), style="bold"), t, *leave)


def _budget(r: WorkerRow) -> str:
    return f"{r.budget_cores * 100:.0f}%" if r.budget_cores else "n/a"


def _num(value: float | int | None, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)


def _secs(value: float | None) -> str:
    if value is None:
        return "n/a"
    m, sec = divmod(int(round(value)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")
