"""Training measurements: ``perfkit run`` in a subprocess, and the plain scripts beside it.

Every training of one benchmark invocation lands in ``ROOT/bench/runs/<name>-<stamp>/``, whose ``datasets``
entry links to ``ROOT/datasets``: perfkit's runs and the plain scripts read the same cached Parquet file,
so both sides train on identical data and the blog-size table is generated once, not per run.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import PERFKIT, Proc, env_with_repo, run_measured, stats
from perfkit.trainer.worker.bare import RESULT_MARK, read_result

JSON_MARK = RESULT_MARK  # a plain script's result line, as perfkit's bare worker prints its own


def runs_dir(root: Path, name: str, stamp: str) -> Path:
    """``ROOT/bench/runs/<name>-<stamp>`` with ``datasets`` -> ``ROOT/datasets`` (the shared data cache)."""
    cache = (Path(root) / "datasets").resolve()
    cache.mkdir(parents=True, exist_ok=True)
    path = Path(root) / "bench" / "runs" / f"{name}-{stamp}"
    path.mkdir(parents=True, exist_ok=True)
    link = path / "datasets"
    if not link.exists():
        link.symlink_to(cache, target_is_directory=True)
    return path


@dataclass
class Training:
    """One measured training: steady figures, per-epoch wall times, and what went wrong if anything."""

    label: str
    wall_s: float | None = None  # the whole command, start-up included
    peak_rss_bytes: int | None = None
    run_dir: str | None = None
    steady_epoch_s: float | None = None  # train + validation, median over epochs after the first
    steady_samples_per_s: float | None = None  # training samples / training seconds, same epochs
    steady_epoch_wall_s: float | None = None  # epoch begin -> epoch end callbacks, same epochs
    epoch_wall_s: list[float] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)  # per epoch: wall_s, train_s, val_s
    val_accuracy: float | None = None
    cpu_mean: float | None = None  # trainer / worker 0, % of one core
    fit_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def steady(values: list[float]) -> float | None:
    """docs/figures.md's steady figure: median over epochs after the first (the only one if there is one)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return None
    return float(statistics.median(vals[1:] if len(vals) > 1 else vals))


def perfkit_run(label: str, args: list[str], results_dir: Path, timeout: float,
                env: dict[str, str] | None = None) -> Training:
    """``perfkit run ARGS --results-dir D --quiet`` (``env`` added to its environment), then its run
    directory read back and summarised."""
    t, proc, run_dir = _perfkit(label, ["run", *args, "--results-dir", str(results_dir), "--quiet"], timeout, env)
    if run_dir is None:
        return t
    t = _fill_from_run(t, run_dir)
    t.extra["cpu_s"] = proc.cpu_s  # the command's and every worker's CPU seconds (wait4)
    return t


def watched_run(label: str, args: list[str], results_dir: Path, timeout: float, interval: float = 1.0) -> Training:
    """``perfkit_run`` with ``perfkit watch RUN --plain --interval INTERVAL`` attached from the moment its run
    directory appears until it finishes: the watcher's own CPU seconds (wait4) and wall time go to ``extra``
    (``watcher_cpu_s``, ``watcher_wall_s``, ``watcher_share``: of one core). Its start-up (Python, imports, a
    first reading) is a fixed cost that a short run cannot spread: measured apart by the same command on the
    finished run (which it reads once and leaves), it gives ``watcher_start_cpu_s`` and the share of a core
    the watcher takes once started, ``watcher_running_share``."""
    import threading

    known = {p.name for p in Path(results_dir).iterdir()} if Path(results_dir).is_dir() else set()
    done, got = threading.Event(), {}

    def attach() -> None:
        while not done.is_set():
            new = [p for p in Path(results_dir).iterdir() if p.name not in known and (p / "run.json").is_file()]
            if new:
                got["proc"] = run_measured([*PERFKIT, "watch", str(new[0]), "--plain", "--interval", str(interval)],
                                           timeout, env=env_with_repo())
                return
            done.wait(0.2)

    thread = threading.Thread(target=attach, name="bench-watcher", daemon=True)
    thread.start()
    t = perfkit_run(label, args, results_dir, timeout)
    done.set()
    thread.join(timeout=60)
    watch: Proc | None = got.get("proc")
    if watch is None or not watch.ok or watch.cpu_s is None:
        t.error = t.error or f"the watcher: {watch.error() if watch else 'never attached'}"
        return t
    t.extra.update(watcher_cpu_s=watch.cpu_s, watcher_wall_s=watch.wall_s, watcher_share=watch.cpu_s / watch.wall_s)
    if t.run_dir:
        start = run_measured([*PERFKIT, "watch", t.run_dir, "--plain"], timeout, env=env_with_repo())
        if start.ok and start.cpu_s is not None and watch.wall_s > start.wall_s:
            t.extra.update(watcher_start_cpu_s=start.cpu_s, watcher_start_wall_s=start.wall_s,
                           watcher_running_share=(watch.cpu_s - start.cpu_s) / (watch.wall_s - start.wall_s))
    return t


def _perfkit(label: str, args: list[str], timeout: float,
             env: dict[str, str] | None = None) -> tuple[Training, Proc, Path | None]:
    """``perfkit ARGS`` (``--quiet``: it prints its run directory last) measured; the run directory, or None
    with the Training's error saying why."""
    proc = run_measured([*PERFKIT, *args], timeout, env={**env_with_repo(), **(env or {})})
    t = Training(label, wall_s=proc.wall_s, peak_rss_bytes=proc.peak_rss_bytes)
    run_dir = printed_run_dir(proc)
    t.run_dir = str(run_dir) if run_dir else None
    if not proc.ok or run_dir is None:
        t.error = proc.error() or f"perfkit {args[0]} printed no run directory"
        return t, proc, None
    return t, proc, run_dir


def printed_run_dir(proc: Proc) -> Path | None:
    """The run directory ``perfkit run --quiet`` printed as its last line, or None."""
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    return Path(lines[-1]) if lines and Path(lines[-1]).is_dir() else None


def _fill_from_run(t: Training, run_dir: Path) -> Training:
    from perfkit.analysis.summary import final_attempt, summarize
    from perfkit.errors import PerfkitError
    from perfkit.results import RunRecord

    try:
        record = RunRecord.load(run_dir)
    except PerfkitError as exc:
        t.error = f"cannot read {run_dir}: {exc}"
        return t
    s = summarize(record)
    if s.status != "complete":
        t.error = f"run {run_dir.name} is {s.status}: {record.run.error}"
        return t
    ep = final_attempt(record.epochs)
    ep0 = ep[ep["worker"] == ep["worker"].min()].sort_values("epoch")
    t.epoch_wall_s = ((ep0["t_end_ns"] - ep0["t_start_ns"]) / 1e9).tolist()
    t.epochs = [{"epoch": int(e) + 1, "wall_s": w, "train_s": float(tr), "val_s": float(v)}
                for e, w, tr, v in zip(ep0["epoch"], t.epoch_wall_s, ep0["train_s"], ep0["val_s"], strict=True)]
    t.steady_epoch_wall_s = steady(t.epoch_wall_s)
    t.steady_epoch_s, t.steady_samples_per_s = s.steady_epoch_s, s.steady_samples_per_s
    t.val_accuracy, t.cpu_mean, t.fit_s = s.val_accuracy, s.cpu_mean, s.fit_s
    t.extra = {"epochs": s.epochs, "startup_s": s.startup_s, "cpu_p95": s.cpu_p95,
               "cpu_budget": record.run.cluster.cpu_budget.get("mechanism"),
               # the sampler thread's own CPU seconds per second of the run (run.json -> sampler)
               "sampler_cpu_share": (record.run.sampler.get("overhead_pct") or math.nan) / 100}
    return t


def script_run(label: str, module: str, args: list[str], timeout: float) -> Training:
    """``python -m MODULE ARGS``: a plain training script that prints one result line (``bare.emit``)."""
    proc = run_measured([sys.executable, "-m", module, *args], timeout, env=env_with_repo())
    t = Training(label, wall_s=proc.wall_s, peak_rss_bytes=proc.peak_rss_bytes)
    result = script_json(proc)
    if not proc.ok or result is None:
        t.error = proc.error() or f"{module} printed no {JSON_MARK.strip()} line"
        return t
    return _from_result(t, result)


def launched_script(label: str, launch_args: list[str], module: str, args: list[str], results_dir: Path,
                    timeout: float) -> Training:
    """``perfkit launch LAUNCH_ARGS -- python -m MODULE ARGS``: the same kind of script on a cluster perfkit
    places; the chief's result line (the only worker's, without one) read back from its worker.log."""
    from perfkit.errors import PerfkitError
    from perfkit.results import load_meta

    t, _, run_dir = _perfkit(label, ["launch", *launch_args, "--results-dir", str(results_dir), "--quiet", "--",
                                     sys.executable, "-m", module, *args], timeout)
    if run_dir is None:
        return t
    try:
        chief = load_meta(run_dir).chief_index
    except PerfkitError as exc:
        t.error = f"cannot read {run_dir}: {exc}"
        return t
    log = run_dir / "workers" / str(chief or 0) / "worker.log"
    result = read_result(log.read_text(encoding="utf-8", errors="replace")) if log.is_file() else None
    if result is None:
        t.error = f"{log} holds no {JSON_MARK.strip()} line"
        return t
    return _from_result(t, result)


def _from_result(t: Training, result: dict[str, Any]) -> Training:
    """A script's training figures from its result line (each epoch's wall, training and validation time)."""
    epochs = result.get("epochs") or []
    samples = int(result["steps_per_epoch"]) * int(result["batch_size"])
    t.epoch_wall_s = [e["wall_s"] for e in epochs]
    t.epochs = epochs
    t.steady_epoch_wall_s = steady(t.epoch_wall_s)
    t.steady_epoch_s = steady([e["train_s"] + e["val_s"] for e in epochs])
    t.steady_samples_per_s = steady([samples / e["train_s"] if e["train_s"] > 0 else math.nan for e in epochs])
    t.val_accuracy = epochs[-1].get("val_accuracy") if epochs else None
    t.fit_s = result.get("fit_s")
    t.extra = {k: v for k, v in result.items() if k != "epochs"}
    return t


def script_json(proc: Proc) -> dict[str, Any] | None:
    return read_result(proc.stdout)


def training_summary(runs: list[Training]) -> dict[str, Any]:
    """Per arm: every run's record plus stats of the figures the tables quote."""
    return {
        "runs": [r.to_dict() for r in runs],
        "steady_epoch_s": stats(r.steady_epoch_s for r in runs),
        "steady_epoch_wall_s": stats(r.steady_epoch_wall_s for r in runs),
        "steady_samples_per_s": stats(r.steady_samples_per_s for r in runs),
        "wall_s": stats(r.wall_s for r in runs),
        "val_accuracy": stats(r.val_accuracy for r in runs),
        "errors": [f"{r.label}: {r.error}" for r in runs if r.error],
    }
