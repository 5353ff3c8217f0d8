"""``perfkit watch --trace-now``: ask every worker of a running run for a trace window at its next step, and
wait for their answers. The request is ``trace-now.json`` in the run (the one file the watcher writes, so
this needs write access to the run); the workers poll it (``profiler/ondemand.py``) and report each request's
capture in their status (``traces_now``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from perfkit._atomic import atomic_write, read_object
from perfkit.errors import TraceNotTaken, UsageError
from perfkit.profiler.ondemand import MAX_STEPS, REQUEST_FILE, read_request

_DONE = ("captured", "failed", "skipped")


def ask(run_dir: Path, steps: int, wall_ns: int | None = None) -> int:
    """Write a new request for ``steps`` steps; its id."""
    if not 1 <= steps <= MAX_STEPS:
        raise UsageError(f"--trace-steps: {steps} is not between 1 and {MAX_STEPS}")
    last = read_request(run_dir)
    rid = (last[0] if last else 0) + 1
    body = {"id": rid, "steps": steps, "asked_wall_ns": time.time_ns() if wall_ns is None else wall_ns}
    try:
        atomic_write(run_dir / REQUEST_FILE, lambda fh: fh.write(json.dumps(body).encode()))
    except OSError as exc:
        raise UsageError(f"--trace-now: cannot write {run_dir / REQUEST_FILE} ({exc.strerror or exc}); the "
                         f"request needs write access to the run directory") from None
    return rid


def answers(run_dir: Path, rid: int) -> dict[int, dict[str, Any] | None]:
    """Each training worker's outcome of request ``rid`` so far (None: not yet); workers that ended are left
    out."""
    out: dict[int, dict[str, Any] | None] = {}
    for wdir in sorted((run_dir / "workers").glob("[0-9]*"), key=lambda p: int(p.name)):
        status = read_object(wdir / "status.json")
        if not status:
            continue
        got = (status.get("traces_now") or {}).get(str(rid))
        if got is None and status.get("state") not in ("training", "joined"):
            continue
        out[int(wdir.name)] = got
    return out


def wait(run_dir: Path, rid: int, timeout_s: float, clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each worker's finished outcome as it comes; ``TraceNotTaken`` naming the workers that did not answer
    within ``timeout_s``, or whose window failed."""
    end, said, failed = clock() + timeout_s, set(), []
    while True:
        now = answers(run_dir, rid)
        for w, got in sorted(now.items()):
            if got is not None and got.get("status") in _DONE and w not in said:
                said.add(w)
                if got.get("status") != "captured":
                    failed.append(f"worker {w}: {got.get('status')} ({got.get('error')})")
                yield w, got
        waiting = [w for w, got in now.items() if w not in said]
        if not waiting:
            break
        if clock() >= end:
            raise TraceNotTaken(f"--trace-now: worker {', '.join(map(str, waiting))} took no trace window within "
                                f"{timeout_s:g} s (request {rid} in {run_dir / REQUEST_FILE})")
        sleep(0.5)
    if failed:
        raise TraceNotTaken("--trace-now: " + "; ".join(failed))
    if not said:
        raise TraceNotTaken(f"--trace-now: no worker of {run_dir.name} is training to take it")
