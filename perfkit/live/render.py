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
    elif s.epoch_eta_s is not None:
        parts.append(f"epoch {s.epoch + 1 if s.epoch is not None else '-'} ends in {_secs(s.epoch_eta_s)} (the loop "
                     f"declares no epoch count: no ETA)")
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
    state = _state(r)
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
    leave = [Text("q or Ctrl-C leaves; the run goes on", style="dim")] if hint else []
    return Group(Text(headline(s), style="bold"), _Workers(s), *leave)


# The table's columns, most needed first: a terminal too narrow for all of them drops from the end of this
# order (the heartbeat's age first) rather than cutting every column to "…", which hides the host names
_KEEP = ("worker", "host", "state", "step", "CPU", "waiting", "steps/s", "budget", "epoch", "RSS", "beat")
_ORDER = ("worker", "host", "state", "epoch", "step", "steps/s", "CPU", "waiting", "budget", "RSS", "beat")
_LEFT = {"worker", "host", "state"}


class _Workers:
    """One row a worker, with the columns the console's width holds (rich asks at each draw, so a resized
    terminal gets the columns it now fits)."""

    def __init__(self, s: Snapshot) -> None:
        self.rows = [_cells(s, r) for r in s.workers]

    def __rich_console__(self, console, options):  # type: ignore[no-untyped-def]
        shown = fitted(self.rows, options.max_width)
        t = Table(show_edge=False, pad_edge=False, header_style="bold")
        for name in shown:
            t.add_column(name, justify="left" if name in _LEFT else "right", no_wrap=True)
        for row in self.rows:
            t.add_row(*(row[name] for name in shown))
        yield t


def fitted(rows: list[dict[str, Text]], width: int) -> list[str]:
    """The columns, in their display order, that fit ``width`` at their natural widths (each cell padded by
    one and ruled off by one); the first three stay even when they alone do not fit."""
    natural = {n: max([len(n)] + [row[n].cell_len for row in rows]) for n in _ORDER}
    keep = list(_KEEP)
    while len(keep) > 3 and sum(natural[n] for n in keep) + 3 * (len(keep) - 1) > width:
        keep.pop()
    return [n for n in _ORDER if n in keep]


def _cells(s: Snapshot, r: WorkerRow) -> dict[str, Text]:
    slow = s.slowest is not None and s.slowest.worker == r.index
    state = _state(r)
    rss = None if r.rss_bytes is None else r.rss_bytes / 2**20
    return {
        "worker": Text(f"{r.index}" + (" (slowest)" if slow else ""), style="bold yellow" if slow else ""),
        "host": Text(r.host), "state": Text(state, style="bold red" if r.state.alarming else ""),
        "epoch": Text(_num(None if r.epoch is None else r.epoch + 1, "d")),
        "step": Text(_num(None if r.step is None else r.step + 1, "d")),
        "steps/s": Text(_num(r.steps_per_s, ".1f")),
        "CPU": Text(_pct(r.cpu_percent)), "waiting": Text(_pct(r.cpu_wait_percent)), "budget": Text(_budget(r)),
        "RSS": Text(_num(rss, ".0f") + (" MiB" if rss is not None else "")),
        "beat": Text(_num(r.beat_age_s, ".0f") + (" s" if r.beat_age_s is not None else "")),
    }


def _state(r: WorkerRow) -> str:
    """The worker's state, with where it is when that state is an alarm (stopped, stuck)."""
    return r.state.value + (f" {r.where}" if r.where and r.state.alarming else "")


def _pct(value: float | None) -> str:
    text = _num(value, ".0f")
    return text if text == "n/a" else text + "%"


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
