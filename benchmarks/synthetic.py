"""Generate synthetic run directories in the exact on-disk format, for benchmarks of `perfkit analyze`.

``write_synthetic_run`` writes a complete multi-worker run (as perfkit lays out a run:
run.json with cluster, anchors and profile; workers/<i>/{steps,epochs}.parquet; cpu.parquet; system.parquet;
and the parsed traces trace_steps.parquet and trace_ops.parquet),
optionally as one part per host (``<run-id>--<host>``, each on its own monotonic clock).
``write_synthetic_baseline`` writes the matching single-mode run. Values are realistic, not measured:
synchronous steps whose time is the slowest worker's compute + input plus a transfer, workers on the
last host computing ``slow_speed`` times as fast, CPU% that follows each worker's busy share of its core
allowance. Everything is vectorised (numpy), so a run of 4 workers x 200k steps with 1M CPU samples is
written in seconds. Only analysis benchmarks and tests use it; nothing here trains or imports TensorFlow. A benchmark:

    from benchmarks.synthetic import write_synthetic_baseline, write_synthetic_run
    write_synthetic_baseline(out); write_synthetic_run(out)   # then time: perfkit analyze --results-dir out
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfkit._atomic import atomic_write
from perfkit.results import TRACE_OPS_FILE, TRACE_STEPS_FILE, write_parquet, write_run_file
from perfkit.runmeta import ClusterRecord, Phase, RunMeta, WorkerRecord

S = 1_000_000_000
WALL0 = 1_796_000_000 * S  # wall clock of the first step
METRICS = ("loss", "accuracy", "auc", "precision", "recall")
RESTART_S = 20.0  # a restarted cluster's start-up, between the lost attempt's last step and the next first step


@dataclass(frozen=True)
class SyntheticSpec:
    run_id: str = "20261201T000000Z-multi-synthetic"
    hosts: tuple[tuple[str, float, int], ...] = (("big", 1.6, 3), ("small", 0.4, 1))  # name, budget cores, workers
    steps: int = 200_000  # training steps per worker, all epochs together
    epochs: int = 4
    cpu_rows: int = 1_000_000  # rows of cpu.parquet (every process of the run, the launcher included)
    compute_s: float = 0.08  # a fast worker's compute per step
    slow_speed: float = 0.4  # speed of the last host's workers relative to the others
    transfer_s: float = 0.01
    input_s: float = 0.002
    val_s: float = 20.0
    batch: int = 1024  # global batch
    seed: int = 0
    trace: bool = True
    parts: bool = False  # one directory per host instead of one for the run
    mode: str = "multi"
    trace_window: int | None = None  # traced steps per worker: None every step (the worst case), N the auto
    #                                  window's first N steps of the second epoch, as a run traces them
    restart_epoch: int | None = None  # the cluster restarted once in this epoch: its first half ran twice
    phases: bool = False  # each worker's start-up states before its first step (status.json's phases)

    @property
    def workers(self) -> int:
        return sum(n for _, _, n in self.hosts)

    def host_of(self) -> list[str]:
        return [name for name, _, n in self.hosts for _ in range(n)]


def write_synthetic_run(results_dir: str | Path, spec: SyntheticSpec = SyntheticSpec()) -> list[Path]:
    """Write the run (or its parts) under ``results_dir``; returns the directories written."""
    rng = np.random.default_rng(spec.seed)
    steps = _simulate_steps(spec, rng)
    epochs = _epoch_bounds(spec, steps)
    hosts = spec.host_of()
    parts = [(h, [w for w in range(spec.workers) if hosts[w] == h]) for h, _, _ in spec.hosts] if spec.parts \
        else [(None, list(range(spec.workers)))]
    offsets = {h: (i + 1) * 1_000_003 * S for i, (h, _, _) in enumerate(spec.hosts)}  # wall - monotonic per host
    if not spec.parts:
        offsets = dict.fromkeys(offsets, offsets[spec.hosts[0][0]])
    out = []
    for part, workers in parts:
        path = Path(results_dir) / (f"{spec.run_id}--{part}" if part else spec.run_id)
        _write_part(path, spec, part, workers, steps, epochs, offsets, rng)
        out.append(path)
    return out


def write_synthetic_baseline(results_dir: str | Path, spec: SyntheticSpec = SyntheticSpec(),
                             run_id: str = "20261130T000000Z-single-synthetic", speed: float = 3.0) -> Path:
    """The single-mode run of the same workload: one process, ``speed`` x one fast worker's compute rate."""
    ticks = max(spec.cpu_rows // (spec.workers + 1), 10)
    single = replace(spec, run_id=run_id, hosts=(("vm", 2.0, 1),), mode="single", parts=False, trace=False,
                     compute_s=spec.compute_s * spec.workers / speed, slow_speed=1.0, transfer_s=0.0, cpu_rows=ticks)
    return write_synthetic_run(results_dir, single)[0]


def _simulate_steps(spec: SyntheticSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """[worker, step] arrays of busy/input/collective/step times and the shared wall-clock step starts."""
    n, w = spec.steps, spec.workers
    speed = np.array([spec.slow_speed if h == spec.hosts[-1][0] and len(spec.hosts) > 1 else 1.0
                      for h in spec.host_of()])
    busy = spec.compute_s / speed[:, None] * rng.lognormal(0.0, 0.08, (w, n))
    inp = spec.input_s * rng.lognormal(0.0, 0.3, (w, n))
    ready = busy + inp
    step = ready.max(axis=0) + spec.transfer_s * rng.lognormal(0.0, 0.2, n)
    per_epoch = max(n // spec.epochs, 1)
    gap = np.full(n, 0.0005)
    gap[per_epoch::per_epoch] += spec.val_s  # validation between epochs
    lost = (0, 0, 0.0)  # first step of the lost attempt, its steps, its seconds with the restart's
    if spec.restart_epoch is not None and 0 < spec.restart_epoch < spec.epochs:
        k0 = spec.restart_epoch * per_epoch
        lost = (k0, per_epoch // 2, float(step[k0:k0 + per_epoch // 2].sum()) + RESTART_S)
        gap[k0] += lost[2]  # the final attempt's epoch starts after the lost half and the restart
    start = WALL0 + np.concatenate([[0], np.cumsum(step[:-1] + gap[1:])]) * S
    return {"busy": busy, "input": inp, "collective": step[None, :] - ready, "step": step,
            "start": start.astype("int64"), "epoch": np.minimum(np.arange(n) // per_epoch, spec.epochs - 1),
            "index": np.arange(n) - np.minimum(np.arange(n) // per_epoch, spec.epochs - 1) * per_epoch,
            "lost": np.array(lost)}


def _epoch_bounds(spec: SyntheticSpec, st: dict[str, np.ndarray]) -> pd.DataFrame:
    df = pd.DataFrame({"epoch": st["epoch"], "start": st["start"], "end": st["start"] + (st["step"] * S)
                       .astype("int64")})
    g = df.groupby("epoch").agg(t_start_ns=("start", "min"), train_end=("end", "max")).reset_index()
    g["train_s"] = (g["train_end"] - g["t_start_ns"]) / S
    g["val_s"] = spec.val_s
    g["t_end_ns"] = g["train_end"] + (g["val_s"] * S).astype("int64")
    progress = (g["epoch"].to_numpy() + 1) / spec.epochs
    for m, lo, hi in (("loss", 0.6, 0.15), ("accuracy", 0.85, 0.965), ("auc", 0.9, 0.99), ("precision", 0.6, 0.85),
                      ("recall", 0.75, 0.94)):
        g[m] = lo + (hi - lo) * progress
        g[f"val_{m}"] = g[m] * (0.98 if m != "loss" else 1.05)
    return g.drop(columns="train_end")


def _write_part(path: Path, spec: SyntheticSpec, part: str | None, workers: list[int], st: dict[str, np.ndarray],
                epochs: pd.DataFrame, offsets: dict[str, int], rng: np.random.Generator) -> None:
    """Each worker's tables written as they are made, the CPU samples in chunks of ticks: a 256-worker run's
    tables do not fit in memory at once, and were never written so by the recorder either."""
    hosts = spec.host_of()
    path.mkdir(parents=True, exist_ok=False)
    for w in workers:
        off = offsets[hosts[w]]
        jitter = rng.integers(0, 200_000, spec.steps)  # each worker enters the step a little apart
        start = st["start"] - off + jitter
        steps = _attempts(spec, st, pd.DataFrame({
            "epoch": st["epoch"].astype("int32"), "step": st["index"].astype("int32"), "t_start_ns": start,
            "t_end_ns": start + (st["step"] * S).astype("int64"), "duration_s": st["step"],
            "samples": np.full(spec.steps, spec.batch // spec.workers, dtype="int64")}))
        ep = epochs.assign(t_start_ns=epochs["t_start_ns"] - off, t_end_ns=epochs["t_end_ns"] - off)
        restarted = spec.restart_epoch is not None and int(st["lost"][1]) > 0
        attempt = (ep["epoch"] >= spec.restart_epoch).astype("int32") if restarted else np.int32(0)
        own = path / "workers" / str(w)
        write_parquet(own / "steps.parquet", steps)
        write_parquet(own / "epochs.parquet", ep.astype({"epoch": "int32"}).assign(attempt=attempt))
        atomic_write(own / "worker.log", lambda fh: fh.write(b"synthetic run: no log\n"))
    interval = _write_samples(path, spec, workers, st, epochs, offsets[hosts[workers[0]]], rng)
    write_run_file(path, _meta(spec, part, workers, offsets, st, interval))
    if spec.trace:
        _write_traces(path, spec, workers, st)


def _attempts(spec: SyntheticSpec, st: dict[str, np.ndarray], rows: pd.DataFrame) -> pd.DataFrame:
    """A worker's steps with the attempt each ran in, as the recorder writes them: after a restart, the lost
    attempt's half epoch (attempt 0, before the restart) beside the final attempt's whole epoch (attempt 1)."""
    k0, n_lost, lost_s = int(st["lost"][0]), int(st["lost"][1]), float(st["lost"][2])
    if not n_lost:
        return rows.assign(attempt=np.int32(0))
    rows = rows.assign(attempt=(np.arange(len(rows)) >= k0).astype("int32"))
    shift = np.int64(round(lost_s * S))
    first = rows.iloc[k0:k0 + n_lost].assign(attempt=np.int32(0))
    first = first.assign(t_start_ns=first["t_start_ns"] - shift, t_end_ns=first["t_end_ns"] - shift)
    return pd.concat([rows.iloc[:k0], first, rows.iloc[k0:]], ignore_index=True)


CHUNK_ROWS = 2_000_000  # CPU samples made and written at a time


def _write_samples(path: Path, spec: SyntheticSpec, workers: list[int], st: dict[str, np.ndarray],
                   epochs: pd.DataFrame, offset: int, rng: np.random.Generator) -> float:
    """cpu.parquet and system.parquet in the sampler's order (every process of a tick, tick by tick), the CPU
    samples a chunk of ticks at a time; returns the sampling interval in seconds."""
    procs = np.array(workers + ([-1] if spec.mode == "multi" else []))
    parts = len(spec.hosts) if spec.parts else 1
    ticks = max(spec.cpu_rows // parts // len(procs), 2)
    t = np.linspace(st["start"][0] - 2 * S, int(epochs["t_end_ns"].max()) + 2 * S, ticks).astype("int64") - offset
    hosts, budgets = spec.host_of(), {h: c / n for h, c, n in spec.hosts}
    busy_share = np.median(st["busy"] / st["step"][None, :], axis=1)
    launcher = procs < 0
    level = np.array([1.5 if p < 0 else budgets[hosts[p]] * 100 * busy_share[p] for p in procs])
    names = list(dict.fromkeys(["vm", *hosts]))  # host column as codes: 160M Python strings would not fit
    host_code = np.array([0 if p < 0 else names.index(hosts[p]) for p in procs], dtype="int8")
    role = "trainer" if spec.mode == "single" else "worker"
    growth = np.linspace(0, 30 * 2**20, ticks).astype("int64")
    per_chunk = max(CHUNK_ROWS // len(procs), 1)

    def chunks() -> Any:
        for lo in range(0, ticks, per_chunk):
            n = min(per_chunk, ticks - lo)
            yield {"t_ns": np.repeat(t[lo:lo + n], len(procs)), "worker": np.tile(procs.astype("int32"), n),
                   "host": (np.tile(host_code, n), names), "pid": np.tile(4000 + procs.astype("int64") + 1, n),
                   "role": (np.tile(launcher.astype("int8"), n), [role, "launcher"]),
                   "cpu_percent": np.clip(level[None, :] * rng.lognormal(0, 0.06, (n, len(procs))), 0, None).ravel(),
                   "rss_bytes": (np.where(launcher, 150, 900)[None, :] * 2**20 + growth[lo:lo + n, None]).ravel(),
                   "num_threads": np.tile(np.where(launcher, 7, 130).astype("int32"), n)}

    _write_chunks(path / "cpu.parquet", chunks())
    write_parquet(path / "system.parquet", pd.DataFrame({
        "t_ns": np.repeat(t, 2), "core": np.tile(np.array([0, 1], dtype="int32"), ticks),
        "busy_percent": np.clip(rng.normal(90, 5, 2 * ticks), 0, 100)}))
    return float(t[1] - t[0]) / S


def _write_chunks(path: Path, chunks: Any) -> None:
    """One Parquet file written a chunk at a time (a row group each), atomically; a column given as (codes,
    names) is written as the text it codes, made by Arrow (no Python string a row)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(chunk: dict[str, Any]) -> pa.Table:
        return pa.table({k: pa.DictionaryArray.from_arrays(v[0], pa.array(v[1])).cast(pa.string())
                         if isinstance(v, tuple) else v for k, v in chunk.items()})

    tmp = path.with_name(f".{path.name}.tmp")
    writer = None
    try:
        for chunk in chunks:
            t = table(chunk)
            writer = writer or pq.ParquetWriter(tmp, t.schema)
            writer.write_table(t)
    finally:
        if writer is not None:
            writer.close()
    os.replace(tmp, path)


def _write_traces(path: Path, spec: SyntheticSpec, workers: list[int], st: dict[str, np.ndarray]) -> None:
    hosts, at = spec.host_of(), _traced(spec, st)
    n = len(at)
    frames = []
    for w in workers:
        busy = st["busy"][w][at]
        frames.append(pd.DataFrame({
            "worker": np.full(n, w, dtype="int64"), "host": np.full(n, hosts[w], dtype=object),
            "epoch": st["epoch"][at].astype("int64"), "step": st["index"][at].astype("int64"),
            "t_start_ns": st["start"][at], "step_s": st["step"][at], "compute_s": busy * 0.9,
            "collective_s": st["collective"][w][at], "input_s": st["input"][w][at], "other_s": busy * 0.1}))
    write_parquet(path / TRACE_STEPS_FILE, pd.concat(frames, ignore_index=True))
    ops = [("CollectiveReduceV2", "collective_s"), ("MatMul", "compute_s"), ("IteratorGetNext", "input_s")]
    write_parquet(path / TRACE_OPS_FILE, pd.DataFrame([
        {"worker": w, "host": hosts[w], "name": name, "count": n,
         "total_s": float((st["collective"][w] if col == "collective_s" else st["input"][w] if col == "input_s"
                           else st["busy"][w] * 0.9)[at].sum())} for w in workers for name, col in ops]))


def _traced(spec: SyntheticSpec, st: dict[str, np.ndarray]) -> np.ndarray:
    """The steps in the trace window: every step, or the first ``trace_window`` of the second epoch."""
    if spec.trace_window is None:
        return np.arange(spec.steps)
    epoch = min(1, spec.epochs - 1)
    return np.flatnonzero((st["epoch"] == epoch) & (st["index"] < spec.trace_window))


def _meta(spec: SyntheticSpec, part: str | None, workers: list[int], offsets: dict[str, int],
          st: dict[str, np.ndarray], interval_s: float) -> RunMeta:
    hosts = spec.host_of()
    at = _traced(spec, st)
    median = float(np.median(st["step"][at]))
    profile = {"window": {"first": int(at[0]), "last": int(at[-1])}, "session": "synthetic", "workers": {
        str(w): {"status": "captured", "file": None, "error": None, "steps": len(at), "trace_median_step_s": median,
                 "callback_median_step_s": median, "agreement": 1.0, "within_10pct": True} for w in workers}}
    k0, n_lost = int(st["lost"][0]), int(st["lost"][1])
    restarts = [{"attempt": 1, "after": f"worker {spec.workers - 1} ({hosts[-1]}) was killed by SIGKILL",
                 "t_wall_ns": int(st["start"][k0] - RESTART_S * S), "profiler_crash": False, "profile_steps": "auto",
                 "profiles": {}}] if n_lost else []
    cluster = ClusterRecord(
        hosts=tuple({"name": h, "address": f"10.0.0.{i + 1}", "cores": c, "workers": n}
                    for i, (h, c, n) in enumerate(spec.hosts)),
        workers=tuple({"index": w, "host": hosts[w]} for w in range(spec.workers)), num_workers=spec.workers,
        local_workers=tuple(workers), cpu_budget={"host_budgets_cores": {h: c for h, c, _ in spec.hosts}})
    return RunMeta.new(
        spec.run_id, status="complete", started="2026-12-01T00:00:00.000Z", ended="2026-12-01T00:00:00.000Z",
        part={"name": part, "workers": workers} if part else None, mode=spec.mode,
        strategy="MultiWorkerMirroredStrategy" if spec.mode == "multi" else "MirroredStrategy", preset="synthetic",
        config={"mode": spec.mode, "preset": "synthetic", "epochs": spec.epochs, "batch_size": spec.batch,
                "params": {"train_players": 1_000_000, "test_players": 250_000, "sequence_length": 7},
                "seed": spec.seed, "sample_interval": interval_s},
        data={"path": "results/datasets/synthetic-benchmark.parquet", "source": "generated"}, cluster=cluster,
        versions={"perfkit": "synthetic"}, machine={"logical_cores": 2},
        command_started_wall_ns=int(st["start"][0] - 10 * S), sampler={"interval_s": interval_s},
        workers=[WorkerRecord(w, host=hosts[w], pid=4000 + w + 1, role="worker", anchor_wall_ns=WALL0,
                              anchor_mono_ns=WALL0 - offsets[hosts[w]], exit_code=0, state="done",
                              **_startup(spec, w, hosts[w])) for w in workers],
        profile=profile if spec.trace else None, restarts=restarts)


def _startup(spec: SyntheticSpec, w: int, host: str) -> dict[str, Any]:
    """A worker's start and its start-up states before the first step (``spec.phases``): importing, joining the
    cluster and building the model, the last host's workers a little later than the others."""
    if not spec.phases:
        return {}
    late = 1.5 if host == spec.hosts[-1][0] and len(spec.hosts) > 1 else 0.0
    at = {"starting": -8.0 + late / 2, "connecting": -4.0 + late, "training": -1.0}
    cpu = {"starting": 0.4, "connecting": 4.2 + late, "training": 6.5 + late}
    return {"started_wall_ns": WALL0 - 9 * S + w * 1_000_000,
            "phases": tuple(Phase(state, WALL0 + int(t * S) + w * 1_000_000, cpu[state]) for state, t in at.items())}
