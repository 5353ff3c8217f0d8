"""The event cap of ``perfkit export``: what a file of at most ``max_events`` events keeps of a run, and what it
says it left out.

XProf's trace viewer stops at a million events, and a long run of many workers records far more: a step per
worker per step, a CPU sample per process per second. In this order, metadata aside:

1. every epoch, validation, restart and Keras ``train`` step marker;
2. the CPU% and RSS counters, within a quarter of the cap: past it, each process's samples are averaged
   into equal time bins over the run (CPU% their mean, RSS their peak), the same number of bins for every
   process;
3. the steps of whole workers, in index order, while they fit (``--workers`` exports fewer workers whole);
4. the traced window's other events, longest first (a slice is never shorter than one nested in it, so what
   is kept still nests).

``Cap`` says what each rule did; the command's line and the file's ``otherData`` repeat it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

COUNTER_SHARE = 4  # the counters take at most 1/COUNTER_SHARE of the cap
CAP_RULE = ("at most max_events events (metadata aside): epochs, validation, restarts and Keras train markers "
            "always kept; CPU% and RSS counters within a quarter of it (past that, each process's samples averaged "
            "into equal time bins); steps of whole workers in index order while they fit; the traced window's other "
            "events beyond it dropped shortest first")


@dataclass(frozen=True)
class Cap:
    """What the event cap did."""

    max_events: int  # 0: no cap
    trace_events: int  # trace events before the cap (markers included)
    dropped: int  # trace events dropped
    dropped_s: float  # their summed duration
    longest_dropped_ns: int  # every dropped trace event was at most this long
    counter_samples: int = 0  # the CPU samples behind the counters
    counter_bin_s: float | None = None  # None: a counter pair per sample; else each process's samples per bin
    steps_left_out: tuple[int, ...] = ()  # workers whose steps did not fit
    steps_dropped: int = 0
    rule: str = CAP_RULE


def counter_bins(max_events: int, samples: int, processes: int) -> int | None:
    """Bins per process that keep the counters (two a sample: CPU% and RSS) within their share of the cap;
    None: every sample fits."""
    budget = max_events // COUNTER_SHARE
    if not max_events or 2 * samples <= budget:
        return None
    return max(1, budget // 2 // max(processes, 1))


def fitting_steps(steps: pd.DataFrame, room: int | None) -> tuple[pd.DataFrame, tuple[int, ...]]:
    """The steps (a row each) of whole workers, in index order, while they fit in ``room`` events (None: all);
    and the workers left out. Chosen before any slice is made: a long run's steps are millions of rows."""
    if room is None or len(steps) <= room:
        return steps, ()
    workers, counts = np.unique(steps["worker"].to_numpy(), return_counts=True)
    fits = np.cumsum(counts) <= max(room, 0)
    return (steps[steps["worker"].isin(workers[fits])].reset_index(drop=True),
            tuple(int(w) for w in workers[~fits]))


def capped_trace(trace: pd.DataFrame, max_events: int, kept: int) -> tuple[pd.DataFrame, Cap]:
    """The trace events that fit in ``max_events`` (0: all) beside the ``kept`` events already in the file:
    the step markers, then the others longest first."""
    marker = (trace["cat"] == "step_marker").to_numpy()
    others = np.flatnonzero(~marker)
    budget = max(0, max_events - kept - int(marker.sum()))
    if not max_events or len(others) <= budget:
        return trace, Cap(max_events, len(trace), 0, 0.0, 0)
    dur = trace["dur_ns"].to_numpy()
    order = others[np.argsort(-dur[others], kind="stable")]  # longest first; ties: earlier rows first
    keep, drop = np.sort(np.concatenate([np.flatnonzero(marker), order[:budget]])), order[budget:]
    cap = Cap(max_events, len(trace), len(drop), float(dur[drop].sum()) / 1e9, int(dur[drop].max()))
    return trace.iloc[keep].reset_index(drop=True), cap


def cap_notes(cap: Cap, steps_dropped: int) -> list[str]:
    """What the cap left out, in words (the file's notes)."""
    out = []
    if cap.counter_bin_s is not None:
        out.append(f"CPU% and RSS: the {cap.counter_samples:,} CPU samples averaged into bins of "
                   f"{cap.counter_bin_s:,.1f} s per process (CPU% their mean, RSS their peak) to stay within a "
                   f"quarter of --max-events {cap.max_events:,}")
    if cap.steps_left_out:
        out.append(f"steps of worker(s) {', '.join(map(str, cap.steps_left_out))} left out ({steps_dropped:,} steps) "
                   f"to stay within --max-events {cap.max_events:,}: --workers exports fewer workers whole, "
                   f"--max-events 0 every event")
    return out
