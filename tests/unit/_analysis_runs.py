"""Hand-built run directories with known answers, for the analysis tests.

``write_run`` builds a ``RunRecord`` from round numbers and saves it as perfkit lays out a run (run.json;
workers/<i>/{steps,epochs}.parquet; cpu.parquet), optionally with trace_steps.parquet and run.json's
``profile``:

- every step is synchronous: step_s = max over workers of (busy + input) + transfer, the same for all;
- traces: compute_s = 0.75 * busy, other_s = 0.25 * busy, collective_s = step_s - busy - input (exposed);
  with ``overlap``, also collective_total_s = collective_s + overlap and overlap_s = overlap (the columns
  parser version 2 added), else the table is the older kind without them;
- epochs: ``steps`` steps back to back, then ``val_s`` of validation; the first step starts at wall WALL0;
- CPU: a sample every ``interval`` s from ``interval`` after the first step to 1 s after the last epoch,
  each worker at its constant CPU% (the two samples after the end read 999%, outside the window);
- with ``parts``, each host writes ``<run-id>--<host>`` on its own monotonic clock (offset per host).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfkit.results import SYSTEM_COLUMNS, RunRecord, write_parquet, write_run_file
from perfkit.runmeta import ClusterRecord, RunMeta, WorkerRecord

S = 1_000_000_000
WALL0 = 1_800_000_000 * S
STRAGGLER_HOSTS = (("a", 3.0, 3), ("b", 1.0, 1))  # name, cores, workers


def write_run(root: Path, run_id: str, *, mode: str = "multi",
              hosts: tuple[tuple[str, float, int], ...] = STRAGGLER_HOSTS, busy: dict[int, float] | None = None,
              input_s: float = 0.05, transfer: float = 0.1, epochs: int = 3, steps: int = 10, val_s: float = 1.0,
              cpu: dict[int, float] | None = None, interval: float = 0.25, trace: bool = True,
              status: str = "complete", preset: str = "quick", train_players: int = 600, batch: int = 64,
              parts: bool = False, started: str = "2026-01-01T00:00:00.000Z", epochs_recorded: int | None = None,
              val_accuracy: tuple[float, ...] = (0.80, 0.85, 0.90), overlap: float | None = None) -> list[Path]:
    """Write the run (or its parts); returns the directories written."""
    workers = list(enumerate(h for h, _, n in hosts for _ in range(n)))  # (index, host)
    busy = busy or {w: (0.5 if h == hosts[-1][0] and len(hosts) > 1 else 0.2) for w, h in workers}
    cpu = cpu or {w: 100.0 for w, _ in workers}
    step_s = max(busy.values()) + input_s + transfer
    epoch_s = steps * step_s + val_s
    offsets = {h: (1000 + 4000 * i) * S for i, (h, _, _) in enumerate(hosts)} if parts else \
        dict.fromkeys([h for h, _, _ in hosts], 1000 * S)
    everyone = [w for w, _ in workers]
    groups = [(h, [w for w, wh in workers if wh == h]) for h, _, _ in hosts] if parts else [(None, everyone)]
    out = []
    for part, local in groups:
        path = root / (f"{run_id}--{part}" if part else run_id)
        path.mkdir(parents=True)
        tables = [_worker_tables(w, epochs if epochs_recorded is None else epochs_recorded, steps, step_s, val_s,
                                 batch // len(workers), offsets[dict(workers)[w]], val_accuracy) for w in local]
        meta = _meta(run_id, mode, hosts, workers, local, offsets, status, preset, train_players, batch, epochs,
                     interval, started, part, trace)
        RunRecord(path, meta, pd.concat([t[0] for t in tables], ignore_index=True),
                  pd.concat([t[1] for t in tables], ignore_index=True),
                  _cpu_table(local, dict(workers), cpu, interval, epochs * epoch_s, offsets, mode, part),
                  pd.DataFrame(columns=list(SYSTEM_COLUMNS))).save()
        if trace:
            _trace_file(path, local, dict(workers), busy, input_s, step_s, epochs, steps, val_s, overlap)
        out.append(path)
    return out


def step_start(epoch: int, step: int, step_s: float, steps: int, val_s: float) -> float:
    return epoch * (steps * step_s + val_s) + step * step_s


def _worker_tables(w: int, epochs: int, steps: int, step_s: float, val_s: float, samples: int, offset: int,
                   val_accuracy: tuple[float, ...]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Worker ``w``'s steps and epochs tables (with their ``worker`` column, as ``RunRecord`` holds them)."""
    e, s = np.divmod(np.arange(epochs * steps), steps)
    start = np.array([step_start(int(a), int(b), step_s, steps, val_s) for a, b in zip(e, s)])
    mono = WALL0 - offset + np.round(start * S).astype("int64")
    step_rows = pd.DataFrame({
        "epoch": e.astype("int32"), "step": s.astype("int32"), "t_start_ns": mono,
        "t_end_ns": mono + int(round(step_s * S)), "duration_s": step_s, "samples": samples})
    ep = pd.DataFrame({"epoch": np.arange(epochs, dtype="int32")})
    ep["t_start_ns"] = WALL0 - offset + np.round(ep["epoch"] * (steps * step_s + val_s) * S).astype("int64")
    ep["t_end_ns"] = ep["t_start_ns"] + int(round((steps * step_s + val_s) * S))
    ep["train_s"], ep["val_s"] = steps * step_s, val_s
    ep["loss"], ep["accuracy"], ep["auc"] = 0.3, 0.9, 0.95
    ep["val_loss"] = [0.5 - 0.1 * i for i in range(epochs)]
    ep["val_accuracy"] = list(val_accuracy[:epochs])
    ep["val_auc"] = [0.9 + 0.02 * i for i in range(epochs)]
    return step_rows.assign(worker=w), ep.assign(worker=w)


def _cpu_table(local: list[int], host_of: dict[int, str], cpu: dict[int, float], interval: float,
               end_s: float, offsets: dict[str, int], mode: str, part: str | None) -> pd.DataFrame:
    n_in = int(round(end_s / interval))
    t_s = np.concatenate([np.arange(1, n_in + 1) * interval, [end_s + 0.5, end_s + 1.0]])
    mono = WALL0 - offsets[host_of[local[0]]] + np.round(t_s * S).astype("int64")
    rows = []
    procs = [(w, host_of[w], 1000 + w, "worker" if mode == "multi" else "trainer", cpu[w]) for w in local]
    if mode == "multi":
        procs.append((-1, f"{part or 'local'}-machine", 100, "launcher", 1.0))  # same pid on every host
    for w, host, pid, role, pct in procs:
        values = np.concatenate([np.full(n_in, pct), [999.0, 999.0]])
        rows.append(pd.DataFrame({"t_ns": mono, "worker": np.int32(w), "host": host, "pid": pid, "role": role,
                                  "cpu_percent": values, "rss_bytes": (w + 2) * 100 * 2**20,
                                  "num_threads": np.int32(10)}))
    return pd.concat(rows, ignore_index=True)


def _trace_file(path: Path, local: list[int], host_of: dict[int, str], busy: dict[int, float], input_s: float,
                step_s: float, epochs: int, steps: int, val_s: float, overlap: float | None) -> None:
    e, s = np.divmod(np.arange(epochs * steps), steps)
    frames = [pd.DataFrame({
        "worker": w, "host": host_of[w], "epoch": e, "step": s,
        "t_start_ns": WALL0 + np.round(np.array([step_start(int(a), int(b), step_s, steps, val_s)
                                                 for a, b in zip(e, s)]) * S).astype("int64"),
        "step_s": step_s, "compute_s": 0.75 * busy[w], "collective_s": step_s - busy[w] - input_s,
        "input_s": input_s, "other_s": 0.25 * busy[w]}) for w in local]
    df = pd.concat(frames, ignore_index=True)
    if overlap is not None:
        df = df.assign(collective_total_s=df["collective_s"] + overlap, overlap_s=overlap)
    write_parquet(path / "trace_steps.parquet", df)


def _meta(run_id: str, mode: str, hosts: tuple[tuple[str, float, int], ...], workers: list[tuple[int, str]],
          local: list[int], offsets: dict[str, int], status: str, preset: str, train_players: int, batch: int,
          epochs: int, interval: float, started: str, part: str | None, trace: bool) -> RunMeta:
    host_of = dict(workers)
    profile = {"window": {"first": 0, "last": epochs * 10}, "session": "s1", "workers": {
        str(w): {"status": "captured", "file": f"tensorboard/{host_of[w]}-w{w}.xplane.pb", "error": None,
                 "steps": epochs * 10, "trace_median_step_s": 0.65, "callback_median_step_s": 0.65,
                 "agreement": 1.0, "within_10pct": True} for w in local}}
    return RunMeta.new(
        run_id, status=status, error="boom" if status == "failed" else None, started=started, ended=started,
        part={"name": part, "workers": local} if part else None, mode=mode, preset=preset,
        config={"mode": mode, "preset": preset, "epochs": epochs, "batch_size": batch, "seed": 1,
                "params": {"train_players": train_players, "test_players": 150, "sequence_length": 7},
                "sample_interval": interval},
        data={"path": "results/datasets/synth-v1-750p-7d-seed1.parquet", "source": "generated"},
        cluster=ClusterRecord(hosts=tuple({"name": h, "cores": c, "workers": n} for h, c, n in hosts),
                              workers=tuple({"index": w, "host": h} for w, h in workers), num_workers=len(workers),
                              local_workers=tuple(local)),
        sampler={"interval_s": interval},
        workers=[WorkerRecord(w, host=host_of[w], pid=1000 + w, anchor_wall_ns=WALL0,
                              anchor_mono_ns=WALL0 - offsets[host_of[w]]) for w in local],
        profile=profile if trace else None)


def single_run(root: Path, run_id: str, busy: float = 1.0, **kw: Any) -> Path:
    """A single-mode baseline: one trainer on host "vm" (2 cores) at 150% CPU, no trace."""
    return write_run(root, run_id, mode="single", hosts=(("vm", 2.0, 1),), busy={0: busy}, transfer=0.0,
                     cpu={0: 150.0}, trace=False, **kw)[0]


def set_meta(path: Path, **fields: Any) -> None:
    meta = json.loads((path / "run.json").read_text())
    meta.update(fields)
    write_run_file(path, meta)


def typed(fields: dict[str, Any]) -> RunMeta:
    """A run record with just ``fields`` (the rest defaulted), as the loader would give it."""
    return RunMeta.parse({"schema_version": 1, "run_id": "t", **fields}, "test/run.json")


COMMAND = ("python3", "-c", "sum(i * i for i in range(3 * 10**7))")


def stepless_run(root: Path, run_id: str, *, mode: str = "multi", workers: int = 2, wall_s: float = 5.0,
                 cpu: float = 100.0, interval: float = 0.5, started: str = "2026-01-01T00:00:00.000Z",
                 status: str = "complete", exit_code: int = 0, sampled: tuple[int, ...] | None = None,
                 command: tuple[str, ...] = COMMAND) -> Path:
    """A ``perfkit launch`` run whose command recorded no steps (``launch.recorded`` false), as the launcher
    leaves it: run.json (started, and ended ``wall_s`` later), cpu.parquet (each worker of ``sampled``, all by
    default, at ``cpu`` % every ``interval`` s while the command lives, 50 MiB per worker index; the launcher
    at 2%), workers/<i>/worker.log, and no step or epoch table."""
    path = root / run_id
    for w in range(workers):
        (path / "workers" / str(w)).mkdir(parents=True)
        (path / "workers" / str(w) / "worker.log").write_text("")
    t_s = np.arange(1, int(wall_s / interval) + 1) * interval
    rows = [pd.DataFrame({"t_ns": WALL0 + np.round(t_s * S).astype("int64"), "worker": np.int32(w),
                          "host": "localhost" if w >= 0 else "vm", "pid": 1000 + w,
                          "role": "worker" if w >= 0 else "launcher", "cpu_percent": cpu if w >= 0 else 2.0,
                          "rss_bytes": (w + 2) * 50 * 2**20, "num_threads": np.int32(1)})
            for w in [-1, *(range(workers) if sampled is None else sampled)]]
    start = pd.Timestamp(started)
    ended = (start + pd.Timedelta(seconds=wall_s)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    text = " ".join(command)
    meta = RunMeta.new(
        run_id, status=status, error="boom" if status == "failed" else None, started=started, ended=ended, mode=mode,
        config={"mode": mode, "workload": "command", "epochs": None, "batch_size": None, "sample_interval": interval},
        workload={"spec": "command", "name": "command", "version": "", "params": {"command": text}},
        launch={"command": list(command), "recorded": False},
        cluster=ClusterRecord(hosts=({"name": "localhost", "cores": 2.0, "workers": workers},),
                              workers=tuple({"index": w, "host": "localhost"} for w in range(workers)),
                              num_workers=workers, local_workers=tuple(range(workers))),
        sampler={"interval_s": interval},
        workers=[WorkerRecord(w, host="localhost", pid=1000 + w, role="worker", exit_code=exit_code)
                 for w in range(workers)])
    none = pd.DataFrame({"worker": pd.Series(dtype="int64")})
    RunRecord(path, meta, none, none, pd.concat(rows, ignore_index=True), none).save()
    return path
