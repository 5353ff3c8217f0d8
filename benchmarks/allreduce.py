"""Benchmark: the isolated all-reduce of the model's gradients between N local one-core workers.

Each worker is ``python -m benchmarks._allreduce_worker --worker I ...``: pinned to one core with TensorFlow's
pools capped as perfkit pins a one-core worker, joined in a MultiWorkerMirroredStrategy with ring all-reduce
on 127.0.0.1, and timing ``get_replica_context().all_reduce(SUM, tensors)`` inside ``strategy.run`` (the
path Keras' optimizer takes for MWMS gradients) call by call. Arms: the 10 gradient shapes of perfkit's
LSTM (441,729 floats; the headline), one flat pack of as many floats, a single float (the latency floor),
and ``step``: the gradient all-reduce followed by K scalar all-reduces in series (``--small``), as a traced
2-worker training step runs them (one packed gradient all-reduce, then tf-keras' reductions of the loss and
metric values, one after another).

With ``--run RUN_DIR`` the model takes the run's sequence length and, when the run has profiler captures,
K is the traced steps' median collective count less the gradient one, and the traced figures (exposed
communication and longest collective per step, min over workers) are set beside the isolated ones.

    python -m benchmarks allreduce --workers 2 --iterations 50 [--run RUN_DIR] [--small 20]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks._allreduce_worker import ARMS
from benchmarks._common import (
    _POLL_S,
    Proc,
    Report,
    _stop_group,
    conclude,
    env_with_repo,
    finish_args,
    fmt,
    heading,
    make_parser,
    markdown_table,
    progress,
    stats,
)
from benchmarks._runs import JSON_MARK, script_json

NAME = "allreduce"
FLOAT_BYTES = 4
# the traced figure -> the arm that reproduces it in isolation
COMPARED = {"transfer": "step", "gradient_allreduce": "gradients"}
DEFAULT_SMALL = 20  # tf-keras' per-step loss/metric reductions seen in 2-worker traces: ~20 after the gradients


# ------------------------------------------------------------------------------------------------ parent
def worker_cmds(args: argparse.Namespace, ports: list[int]) -> list[list[str]]:
    common = ["--ports", ",".join(map(str, ports)), "--iterations", str(args.iterations), "--warmup",
              str(args.warmup), "--rounds", str(args.repeats), "--sequence-length", str(args.sequence_length),
              "--small", str(args.small), "--parent", str(os.getpid())]
    return [[sys.executable, "-m", "benchmarks._allreduce_worker", "--worker", str(i), *common]
            for i in range(args.workers)]


def run_workers(cmds: list[list[str]], timeout: float) -> list[Proc]:
    """Start every worker at once (they meet in the ring) under one deadline. A worker that fails leaves
    its peers waiting in the collective for ever, so the rest are stopped as soon as one fails."""
    with ExitStack() as stack:
        files = [(stack.enter_context(tempfile.TemporaryFile()), stack.enter_context(tempfile.TemporaryFile()))
                 for _ in cmds]
        start, deadline = time.perf_counter(), time.monotonic() + timeout
        procs = [subprocess.Popen(c, stdout=o, stderr=e, env=env_with_repo(), start_new_session=True)
                 for c, (o, e) in zip(cmds, files, strict=True)]
        done: dict[int, tuple[Any, float]] = {}
        try:
            _poll(procs, done, start, deadline)
        finally:  # timeout, a failed peer or Ctrl-C: never leave a worker behind; it has nothing to save
            # (its result is all or nothing), so no grace period: SIGKILL right after the SIGINT
            timed_out = time.monotonic() > deadline
            for i, p in enumerate(procs):
                if i not in done:
                    done[i] = (_stop_group(p.pid, 0.0), time.perf_counter() - start)
        out = []
        for i, (cmd, p, (o, e)) in enumerate(zip(cmds, procs, files, strict=True)):
            reaped, wall = done[i]
            rc = p.returncode = None if reaped is None else os.waitstatus_to_exitcode(reaped[0])  # Popen must not wait
            texts = []
            for f in (o, e):
                f.seek(0)
                texts.append(f.read().decode("utf-8", "replace"))
            out.append(Proc(cmd, rc, wall, None, *texts, timed_out=timed_out and rc != 0))
    return out


def _poll(procs: list[subprocess.Popen[bytes]], done: dict[int, tuple[Any, float]], start: float,
          deadline: float) -> None:
    """Reap workers as they end until all have, one has failed, or the deadline passes."""
    while len(done) < len(procs) and time.monotonic() <= deadline:
        for i, p in enumerate(procs):
            if i not in done:
                got, status, usage = os.wait4(p.pid, os.WNOHANG)
                if got:
                    done[i] = ((status, usage), time.perf_counter() - start)
        if any(os.waitstatus_to_exitcode(r[0]) != 0 for r, _ in done.values()):
            return
        time.sleep(_POLL_S)


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), without importing numpy."""
    vals = sorted(v for v in values if math.isfinite(v))
    if not vals:
        return None
    pos = (len(vals) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def summary_ms(seconds: list[float]) -> dict[str, Any]:
    ms = [s * 1e3 for s in seconds]
    return {**stats(ms), "p10": percentile(ms, 0.1), "p90": percentile(ms, 0.9)}


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Worker 0's times, and per iteration the slowest worker's (what the step waits for)."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        per_worker = [r["arms"][arm] for r in results]
        floats = results[0]["floats"][arm]
        out[arm] = {"tensors": results[0]["tensors"][arm], "floats": floats, "bytes": floats * FLOAT_BYTES,
                    "worker0_ms": summary_ms(per_worker[0]),
                    "max_over_workers_ms": summary_ms([max(t) for t in zip(*per_worker, strict=True)])}
    return out


def measure(args: argparse.Namespace) -> Report:
    from perfkit.cluster import free_ports

    report = Report(NAME, {"repeats": args.repeats, "workers": args.workers, "iterations": args.iterations,
                           "warmup": args.warmup, "sequence_length": args.sequence_length,
                           "run": str(args.run) if args.run else None, "small": args.small,
                           "small_from": args.small_from, "timeout_s": args.timeout})
    if args.traced:
        report.results["traced"] = args.traced
    progress(f"{args.workers} workers, {args.repeats} round(s) x {args.iterations} timed all-reduces per arm")
    procs = run_workers(worker_cmds(args, free_ports(args.workers)), args.timeout)
    results = [script_json(p) if p.ok else None for p in procs]
    for i, (p, r) in enumerate(zip(procs, results, strict=True)):
        if r is None:
            report.errors.append(f"worker {i}: {p.error() or f'printed no {JSON_MARK.strip()} line'}")
        elif not r.get("correct"):
            report.errors.append(f"worker {i}: the all-reduced values are wrong: {r.get('check')}")
    report.results["workers"] = [{"index": i, "wall_s": p.wall_s, "rc": p.rc,
                                  **({k: v for k, v in r.items() if k != "arms"} if r else {})}
                                 for i, (p, r) in enumerate(zip(procs, results, strict=True))]
    if all(results):
        report.results["arms"] = summarise([r for r in results if r])
        report.results["raw_s"] = [r["arms"] for r in results if r]
        if args.traced:
            report.results["comparison"] = comparison(report.results["arms"], args.traced)
    return report


def table(report: Report) -> str:
    arms = report.results.get("arms")
    if not arms:
        return f"{heading(report)}\n\n(no measurement: every worker must finish)"
    rows = []
    for arm, a in arms.items():
        w0, mx = a["worker0_ms"], a["max_over_workers_ms"]
        # a few bytes measure latency, not bandwidth: no GB/s for them, nor for 'step', mostly serial scalars
        bandwidth = w0["median"] and a["bytes"] >= 1024 and arm != "step"
        gbps = a["bytes"] / (w0["median"] / 1e3) / 1e9 if bandwidth else None
        label = f"step (gradients + {report.params['small']} scalars)" if arm == "step" else arm
        rows.append([label, a["tensors"], f"{a['floats']:,}", f"{a['bytes']:,}", fmt(w0["median"], ".3f"),
                     fmt(w0["p10"], ".3f"), fmt(w0["p90"], ".3f"), fmt(mx["median"], ".3f"), fmt(mx["p90"], ".3f"),
                     fmt(gbps, ".3f", "-")])
    head = ["arm", "tensors", "floats", "bytes", "w0 median ms", "w0 p10 ms", "w0 p90 ms", "max-worker median ms",
            "max-worker p90 ms", "payload GB/s"]
    p = report.params
    note = (f"{p['workers']} one-core workers, RING all-reduce (SUM) on 127.0.0.1; {w0['n']} timed calls per arm "
            f"after {p['warmup']} warm-up; a call is strategy.run + .numpy() of a scalar, so 'one float' is the "
            f"floor every step pays. 'step' is one call of the gradient all-reduce and then {p['small']} scalar "
            f"all-reduces in series (K {p['small_from']}): {fmt(per_scalar_ms(arms, p['small']), '.3f', '-')} ms "
            f"per scalar over the gradients arm (w0 medians).")
    out = f"{heading(report)}\n\n{markdown_table(head, rows, right=tuple(range(1, 10)))}\n\n{note}"
    return out + (f"\n\n{comparison_table(report)}" if report.results.get("comparison") else "")


def per_scalar_ms(arms: dict[str, Any], small: int) -> float | None:
    step, grads = arms["step"]["worker0_ms"]["median"], arms["gradients"]["worker0_ms"]["median"]
    return (step - grads) / small if small and step is not None and grads is not None else None


def comparison(arms: dict[str, Any], traced: dict[str, Any]) -> dict[str, Any]:
    """Each traced median beside the isolated arm that reproduces it (worker 0's median), as traced/isolated."""
    out = {}
    for name, arm in COMPARED.items():
        got, iso = traced[f"{name}_ms"]["median"], arms[arm]["worker0_ms"]["median"]
        out[name] = {"arm": arm, "traced_ms": got, "isolated_ms": iso,
                     "ratio": got / iso if got is not None and iso else None}
    return out


def comparison_table(report: Report) -> str:
    t, p = report.results["traced"], report.params
    labels = {"transfer": "traced transfer per step (min over workers of exposed collective)",
              "gradient_allreduce": "traced gradient all-reduce (min over workers of the longest collective)"}
    rows = []
    for name, c in report.results["comparison"].items():
        arm = f"step (gradients + {p['small']} scalars)" if c["arm"] == "step" else c["arm"]
        rows.append([labels[name], fmt(c["traced_ms"], ".3f"), arm, fmt(c["isolated_ms"], ".3f"),
                     fmt(c["ratio"], ".2f", "-")])
    head = ["traced figure", "traced median ms", "isolated arm", "isolated w0 median ms", "traced / isolated"]
    note = (f"{t['steps']} traced steps of {p['run']} (workers {', '.join(t['workers'])}); per step the min over "
            f"workers, i.e. the worker that waited least; worker 0's steps held {fmt(t['collectives'], '.0f', '-')} "
            f"collective ops (median).")
    return f"{markdown_table(head, rows, right=(1, 3, 4))}\n\n{note}"


def sequence_length_of(run_dir: Path) -> int:
    try:
        config = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["config"]
        return int(config["params"]["sequence_length"] if "params" in config else config["sequence_length"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--run: cannot read config.params.sequence_length from {run_dir / 'run.json'}: "
                         f"{exc}") from None


def captures(run_dir: Path) -> dict[str, Path]:
    """run.json -> profile -> workers: the capture file of every worker whose status is 'captured'."""
    try:
        meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    profile = meta.get("profile") if isinstance(meta.get("profile"), dict) else {}
    workers = profile.get("workers") if isinstance(profile.get("workers"), dict) else {}
    return {str(k): run_dir / w["file"] for k, w in sorted(workers.items(), key=lambda kw: str(kw[0]))
            if isinstance(w, dict) and w.get("status") == "captured" and w.get("file")}


def traced_figures(run_dir: Path) -> dict[str, Any] | None:
    """The traced steps' figures, or None without a readable capture. K = worker 0's median collective
    count less one (the gradient pack); per (epoch, step) traced on every worker, the min over workers of
    the exposed communication and of the longest collective: a fast worker's figures hold its wait for
    the slow one, so the worker that waited least is the closest to the transfer itself."""
    from perfkit.profiler import xplane  # numpy, pandas and the schema loaded by file path: no TensorFlow

    parsed, skipped = {}, []
    for k, path in captures(run_dir).items():
        try:
            parsed[k] = xplane.parse(path).steps
        except xplane.XPlaneError as exc:
            skipped.append(str(exc))
    for msg in skipped:
        progress(f"--run: skipped a capture: {msg}")
    if not parsed:
        return None
    import pandas as pd

    steps = pd.concat([df.assign(worker=k) for k, df in parsed.items()])
    per_step = steps.groupby(["epoch", "step"]).agg(
        workers=("worker", "nunique"), collective_s=("collective_s", "min"), allreduce_max_s=("allreduce_max_s", "min"))
    per_step = per_step[per_step["workers"] == len(parsed)]
    w0 = parsed.get("0")
    collectives = float(w0["collectives"].median()) if w0 is not None and len(w0) else None
    return {"workers": sorted(parsed), "skipped": skipped, "steps": len(per_step), "collectives": collectives,
            "small": max(0, round(collectives) - 1) if collectives is not None else None,
            "transfer_ms": stats(per_step["collective_s"] * 1e3),
            "gradient_allreduce_ms": stats(per_step["allreduce_max_s"] * 1e3)}


def choose_small(args: argparse.Namespace) -> None:
    """K: --small if given, else from the --run's traces, else the default; args.traced for the tables."""
    args.traced = traced_figures(args.run) if args.run else None
    if args.run and args.traced is None:
        progress(f"--run {args.run}: no profiler capture to read; K = {DEFAULT_SMALL} scalars, no traced figures")
    from_trace = args.traced["small"] if args.traced else None
    if args.run and args.traced and from_trace is None:
        progress(f"--run {args.run}: worker 0 has no parsed capture; K = {DEFAULT_SMALL} scalars")
    if args.small is not None:
        args.small_from = "from --small"
    elif from_trace is not None:
        args.small, args.small_from = from_trace, "from the traced collectives"
    else:
        args.small, args.small_from = DEFAULT_SMALL, "by default"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_preset=None, default_repeats=1)
    p.add_argument("--workers", type=int, default=2, help="local one-core workers (>= 2)")
    p.add_argument("--iterations", type=int, default=50, help="timed all-reduces per arm and round")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per arm first")
    p.add_argument("--run", type=Path, default=None,
                   help="a run directory: build the model with its config.sequence_length; with profiler "
                        "captures, take K from them and compare with the traced figures")
    p.add_argument("--small", type=int, default=None, metavar="K",
                   help=f"scalar all-reduces after the gradients in the 'step' arm (default: from --run's traces, "
                        f"else {DEFAULT_SMALL})")
    args = p.parse_args(argv)
    if args.workers < 2 or args.iterations < 1 or args.warmup < 0 or (args.small or 0) < 0:
        raise SystemExit("--workers >= 2, --iterations >= 1, --warmup >= 0 and --small >= 0, please")
    args.sequence_length = sequence_length_of(args.run) if args.run else 7
    choose_small(args)
    if args.timeout is None:  # start-up dominates: TF import and the cluster joining, ~20 s on 2 cores
        args.timeout = 180.0 if args.smoke else 600.0
    args = finish_args(args)
    if args.smoke:
        args.iterations, args.warmup = 5, 2
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
