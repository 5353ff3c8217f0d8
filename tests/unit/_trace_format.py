"""What Perfetto's JSON importer (and chrome://tracing) read of a trace-event file, checked without them.

Perfetto's trace processor fetches its binary at run time, which cannot work offline, so the tests check the
fields its JSON importer reads: every event has ``ph``, ``pid``, ``tid`` and a numeric ``ts`` (microseconds);
"X" slices a ``dur`` >= 0 and, per thread, nest (a slice that starts inside another ends inside it);
"C" counters numeric args; "i" instants a scope; "M" metadata names every pid and (pid, tid) used.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

PHASES = {"M", "X", "i", "C"}
WORKER_NAME = re.compile(r"^(worker|chief|ps) (\d+) \((.+)\)$")


def read_trace(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), "not a trace-event object"
    return doc


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_format(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Assert the fields above; returns the events."""
    events = doc["traceEvents"]
    processes = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        assert e.get("ph") in PHASES, e
        assert isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), e
        assert _number(e.get("ts")) and e["ts"] >= 0, e
        if e["ph"] == "M":
            assert e["name"] in {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}, e
            continue
        assert e["pid"] in processes and (e["pid"], e["tid"]) in threads, f"unnamed pid/tid: {e}"
        assert isinstance(e.get("name"), str) and e["name"], e
        if e["ph"] == "X":
            assert _number(e.get("dur")) and e["dur"] >= 0, e
            spans[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        elif e["ph"] == "C":
            assert e.get("args") and all(_number(v) for v in e["args"].values()), e
        else:
            assert e.get("s") in {"g", "p", "t"}, e
    for track, intervals in spans.items():
        _assert_nested(track, intervals)
    return events


def _assert_nested(track: tuple[int, int], intervals: list[tuple[float, float]]) -> None:
    open_ends: list[float] = []
    for start, end in sorted(intervals, key=lambda se: (se[0], -se[1])):
        while open_ends and start >= open_ends[-1]:
            open_ends.pop()
        assert not open_ends or end <= open_ends[-1] + 1e-3, f"track {track}: slice {start}-{end} crosses its parent"
        open_ends.append(end)


def worker_pids(events: list[dict[str, Any]]) -> dict[int, tuple[int, str]]:
    """pid -> (worker index, host) from the process names."""
    out = {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "process_name":
            m = WORKER_NAME.match(e["args"]["name"])
            if m:
                out[e["pid"]] = (int(m.group(2)), m.group(3))
    return out


def of(events: list[dict[str, Any]], ph: str, cat: str | None = None, pid: int | None = None) -> list[dict[str, Any]]:
    return [e for e in events if e["ph"] == ph and (cat is None or e.get("cat") == cat)
            and (pid is None or e["pid"] == pid)]
