"""What every benchmark shares: options, the machine, measured subprocesses, stats, JSON and Markdown.

Benchmarks drive perfkit the way users do (``python -m perfkit ...`` in a subprocess), so this module never
imports TensorFlow. Every subprocess runs in its own process group, under a timeout, with its peak RSS read
from ``os.wait4`` (that child and its reaped descendants, not the whole session as RUSAGE_CHILDREN would).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from perfkit.config import PRESETS
from perfkit.machine import machine_info, versions
from perfkit.results import utc_now, write_json
from perfkit.studies.rounds import rounds

T = TypeVar("T")
CHECKOUT = Path(__file__).resolve().parents[1]  # perfkit's source checkout: benchmarks/, perfkit/, examples/, tests/
PERFKIT = (sys.executable, "-m", "perfkit")
# Per-subprocess limits by preset: a blog-size run takes ~30 min on 2 cores, an emulated cluster longer.
DEFAULT_TIMEOUT_S = {"tiny": 600.0, "quick": 3600.0, "blog": 4 * 3600.0}
_POLL_S = 0.1
_STOP_GRACE_S = 30.0


# ----------------------------------------------------------------------------------------------- options
def make_parser(name: str, doc: str | None, *, default_preset: str | None = "quick",
                default_repeats: int = 3) -> argparse.ArgumentParser:
    """The options every benchmark takes; ``--smoke`` means the tiny preset (trainings at ``smoke_size``) and
    one repeat."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks {name}", description=(doc or name).strip().splitlines()[0])
    if default_preset is not None:
        p.add_argument("--preset", choices=list(PRESETS), default=default_preset, help="workload size")
    p.add_argument("--repeats", type=int, default=default_repeats, help="measurements per arm (interleaved)")
    p.add_argument("--smoke", action="store_true", help="smallest run (tiny preset, few steps, 1 repeat) for the tests")
    p.add_argument("--results-root", type=Path, default=Path("results"),
                   help="JSON goes to ROOT/bench/, runs to ROOT/bench/runs/, the data cache is ROOT/datasets")
    p.add_argument("--timeout", type=float, default=None, help="seconds per subprocess (default: by preset)")
    return p


# --smoke trainings: the tiny preset (batch 256) cut to 4 training steps and 1 validation step an epoch, the
# smallest size whose default trace window (3 steps in: ``tracewindow.resolve``) still holds 2 steps and
# whose verification window (``analysis.verify.verification_window``: >= 3 steps an epoch) is not "off".
# A run's time is mostly start-up and the first step's graph building, whatever the size.
SMOKE_PLAYERS = (1024, 256)


def smoke_size(args: argparse.Namespace) -> list[str]:
    """``perfkit run`` flags that size a --smoke training (none otherwise: the preset's sizes)."""
    if not getattr(args, "smoke", False):
        return []
    return ["--train-players", str(SMOKE_PLAYERS[0]), "--test-players", str(SMOKE_PLAYERS[1])]


def choice_list(flag: str, text: str, choices: Sequence[str]) -> list[str]:
    """A comma-separated option's items, each one of ``choices``; a usage error naming the flag otherwise."""
    items = [c.strip() for c in str(text).split(",") if c.strip()]
    bad = [c for c in items if c not in choices]
    if bad or not items:
        raise SystemExit(f"{flag}: {', '.join(bad) or 'none given'}; choose from {', '.join(choices)}")
    return items


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    if args.smoke:
        if hasattr(args, "preset"):
            args.preset = "tiny"
        args.repeats = 1
    if args.repeats < 1:
        raise SystemExit("--repeats: must be at least 1")
    if args.timeout is None:
        args.timeout = DEFAULT_TIMEOUT_S.get(getattr(args, "preset", "quick"), 3600.0)
    args.stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return args


# ----------------------------------------------------------------------------------------------- machine
def machine() -> dict[str, Any]:
    info = machine_info()
    info["available_cores"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    info["load_average"] = list(os.getloadavg())  # a busy machine makes every figure below suspect
    return info


def describe_machine(m: dict[str, Any]) -> str:
    mem = m.get("memory_bytes") or 0
    load = m.get("load_average") or [math.nan]
    return (f"{m.get('cpu_model', '?')}, {m.get('logical_cores', '?')} logical cores, "
            f"{mem / 2**30:.1f} GiB, load average {load[0]:.2f} at start")


# ------------------------------------------------------------------------------------------ subprocesses
@dataclass
class Proc:
    """One finished (or killed) subprocess: exit code, wall time, peak RSS, its output."""

    cmd: list[str]
    rc: int | None
    wall_s: float
    peak_rss_bytes: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    cpu_s: float | None = None  # user + system seconds of the command and every child it reaped

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def error(self) -> str | None:
        if self.timed_out:
            return f"timed out after {self.wall_s:.0f} s: {' '.join(self.cmd[:6])} ..."
        if self.rc is None:
            return f"could not be reaped after SIGKILL: {' '.join(self.cmd[:6])} ..."
        if self.rc != 0:
            lines = [ln for ln in self.stderr.strip().splitlines() if ln.strip()]
            return f"exit {self.rc}: {lines[-1][:300] if lines else '(no stderr)'}"
        return None


def _stop_group(pid: int, grace_s: float) -> tuple[int, Any] | None:
    """SIGINT the child's group (perfkit then saves its records), SIGKILL it after a grace period; None
    when even SIGKILL did not end it within a minute (a process stuck in the kernel: give up on it)."""
    for sig, grace in ((signal.SIGINT, grace_s), (signal.SIGKILL, 60.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        end = time.monotonic() + grace
        while time.monotonic() < end:
            got, status, usage = os.wait4(pid, os.WNOHANG)
            if got:
                return status, usage
            time.sleep(_POLL_S)
    return None


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> tuple[tuple[int, Any] | None, bool]:
    """(wait status and rusage of the child, or None if it could not be reaped; whether it timed out)."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() <= deadline:
            got, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if got:
                return (status, usage), False
            time.sleep(_POLL_S)
        return _stop_group(proc.pid, 10.0), True
    except BaseException:  # Ctrl-C of the benchmark: never leave a training behind
        _stop_group(proc.pid, _STOP_GRACE_S)
        raise


def rss_floor_bytes() -> int | None:
    """The peak RSS a measured command reports at the least from this process: a bare ``python -c pass``'s,
    this process's own high-water mark included (Linux carries it over a fork into the child's ``ru_maxrss``)."""
    return run_measured([sys.executable, "-c", "pass"], 60).peak_rss_bytes


def run_measured(cmd: Sequence[str], timeout: float, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> Proc:
    """Run ``cmd`` (no shell) to completion or ``timeout``; output goes to temp files, not pipes, so a
    chatty child can never block on a full pipe."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, cwd=cwd, env=env, start_new_session=True)
        reaped, timed_out = _wait(proc, timeout)
        wall = time.perf_counter() - start
        rc, rss, cpu = None, None, None
        if reaped is not None:
            status, usage = reaped
            rc = proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: Popen must not wait
            scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
            rss = int(usage.ru_maxrss) * scale
            cpu = float(usage.ru_utime + usage.ru_stime)
        out.seek(0)
        err.seek(0)
        text_out, text_err = (f.read().decode("utf-8", "replace") for f in (out, err))
    return Proc(list(cmd), rc, wall, rss, text_out, text_err, timed_out, cpu)


def env_with_repo() -> dict[str, str]:
    """This environment, with the directory holding ``perfkit`` on PYTHONPATH so ``python -m benchmarks.x``
    children import the same code as this process (a checkout, or a snapshot of one), installed or not."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


# ----------------------------------------------------------------------------------------- repeat, stats
def interleave(arms: dict[str, Callable[[int], T]], repeats: int,
               log: Callable[[str], None] | None = None, rotate: bool = True) -> dict[str, list[T]]:
    """Run every arm once per round (A B C, B C A, C A B, ...): slow drift of the machine hits all alike.

    Each round starts one arm later than the last, so a drift within a round (a machine warming up, a
    neighbour starting) does not land on the same arm every time. ``rotate=False`` keeps the given order
    for arms that measure what an earlier arm of the same round left behind (a second, cached analysis).
    """
    out: dict[str, list[T]] = {name: [] for name in arms}
    names = list(arms)
    for i, name in rounds(names, repeats, rotate):
        if log:
            log(f"[{i + 1}/{repeats}] {name}")
        out[name].append(arms[name](i))
    return out


def finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def stats(values: Iterable[Any]) -> dict[str, Any]:
    """median/min/max over the measurements that succeeded; ``failed`` counts the others."""
    raw = list(values)
    good = [v for v in (finite(x) for x in raw) if v is not None]
    return {
        "median": statistics.median(good) if good else None,
        "min": min(good) if good else None,
        "max": max(good) if good else None,
        "n": len(good),
        "failed": len(raw) - len(good),
        "values": [finite(x) for x in raw],
    }


def ratios(num: Sequence[Any], den: Sequence[Any]) -> dict[str, Any]:
    """Paired ratios num[i] / den[i] (same round of the interleave), summarised by ``stats``."""
    pairs = [(finite(a), finite(b)) for a, b in zip(num, den, strict=True)]
    return stats([a / b if a is not None and b else None for a, b in pairs])


# ------------------------------------------------------------------------------------------ JSON, tables
def _clean(obj: Any) -> Any:
    """JSON has no NaN/inf: a figure that could not be measured is written as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


@dataclass
class Report:
    """What a benchmark writes: its parameters, the machine, the results, and every error met."""

    name: str
    params: dict[str, Any]
    machine: dict[str, Any] = field(default_factory=machine)
    started: str = field(default_factory=utc_now)
    results: dict[str, Any] = field(default_factory=dict)
    targets: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return _clean({
            "benchmark": self.name, "started": self.started, "ended": utc_now(), "ok": not self.errors,
            "machine": self.machine, "versions": versions(), "params": self.params,
            "targets": self.targets, "results": self.results, "errors": self.errors,
        })

    def write(self, root: Path, stamp: str) -> Path:
        path = Path(root) / "bench" / f"{self.name}-{stamp}.json"
        write_json(path, self.to_dict())
        return path


def fmt(x: Any, spec: str = ".2f", missing: str = "failed") -> str:
    v = finite(x)
    return missing if v is None else format(v, spec)


def fmt_range(s: dict[str, Any], spec: str = ".2f") -> str:
    """``median (min–max)`` of a ``stats`` dict, or 'failed' when nothing was measured."""
    if s.get("median") is None:
        return "failed"
    if s["n"] == 1:
        return fmt(s["median"], spec)
    return f"{fmt(s['median'], spec)} ({fmt(s['min'], spec)}–{fmt(s['max'], spec)})"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = ()) -> str:
    align = ["---:" if i in right else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


VERDICT_WORD = {True: "meets", False: "misses", None: "not measured"}  # a Report's meets_target, in words


def ratio_sentence(what: str, ratio: dict[str, Any], meets: bool | None, target: float) -> str:
    """``Steady epoch-time ratio 0.993 (meets the target <= 1.03); median (min–max) over repeats.``"""
    return (f"{what} ratio {fmt(ratio['median'], '.3f')} ({VERDICT_WORD[meets]} the target <= {target}); "
            "median (min–max) over repeats.")


def heading(report: Report) -> str:
    return (f"**{report.name}** ({report.started[:10]}; {describe_machine(report.machine)}; "
            f"preset {report.params.get('preset', '-')}, {report.params.get('repeats', '-')} repeat(s))")


def conclude(report: Report, args: Any, table: Callable[[Report], str]) -> int:
    """Write the JSON, print the Markdown table and every error; exit 1 when anything failed."""
    path = report.write(args.results_root, args.stamp)
    print(table(report))
    print(f"\nwrote {path}")
    for err in report.errors:
        print(f"error: {err}")
    return 0 if not report.errors else 1


def progress(text: str) -> None:
    """Progress goes to stderr so stdout stays the Markdown table."""
    print(f"bench: {text}", file=sys.stderr, flush=True)
