"""A scaling study (``perfkit sweep``): speedup and efficiency against the number of workers (or replicas).

A sweep directory holds ``sweep.json`` (``SweepRecord``: what was asked, and every run it started, in run
order); its runs are ordinary run directories beside it, in the sweep directory's parent (the results
directory, so they share its data cache and ``perfkit analyze`` reads them as any run).

Definitions (docs/scaling.md):

- the reference: the sweep's baseline runs (a single-mode run on the whole machine), or, for a scale model
  (``--cores-per-worker C``), the one-worker runs (one emulated host of C cores: the scale model's single
  machine). Its rate is the mean over its repeats of steady-epoch samples / steady-epoch seconds;
- a run's speedup is its rate over the reference's (per sample, as ``analyze``'s ``speedup`` with its
  ``work_ratio``: weak scaling trains more samples per step); a point's speedup is the mean over its repeats,
  with their min and max; efficiency = speedup / N; the ideal line is speedup = N;
- the per-step split: a steady step (steady training seconds / steps per epoch) shared out as the run's
  split (``analyze``: from traces or estimated) shares it, compute (busy and input together where the split
  has no input), all-reduce transfer, wait for the slowest worker; one worker has no transfer or wait;
- CPU cost per 1,000 samples: ``analyze``'s ``cpu_s_per_1k_samples``;
- the ways (``--ways``): each point is a count of replicas in one process, of worker processes or of ps
  workers, against the same reference; memory per replica and the sync cost per step are
  ``ways.py``'s. A sweep recorded before ``--ways`` ran the workers way.

Only complete runs are used; a sweep cut short gives the points it finished (a partial curve).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfkit.analysis.scaling.roles import BASELINE, POINT, PROBE, WORKERS
from perfkit.cluster import ClusterSpec
from perfkit.errors import PerfkitError, ResultsError
from perfkit.results import RunRecord, load_meta, write_json

SWEEP_FILE = "sweep.json"
RUN_COLUMNS = ["run_id", "round", "role", "way", "workers", "global_batch", "per_worker_batch", "steps",
               "steady_epoch_s", "train_s", "val_s", "epoch_samples", "step_s", "compute_s", "transfer_s", "wait_s",
               "input_s", "split_source", "cpu_s_per_1k_samples", "rss_peak_max_bytes", "replicas_per_process",
               "processes", "memory_per_replica_bytes", "sync_s", "rate", "speedup", "clean_step_s", "clean_step_cv",
               "clean_val_s", "val_steps", "machine_cores", "worker_cores", "other_cores"]
POINT_COLUMNS = ["point", "way", "workers", "runs", "speedup", "speedup_lo", "speedup_hi", "speedup_sd", "efficiency",
                 "efficiency_lo", "efficiency_hi", "ideal_speedup", "steady_epoch_s", "step_s", "compute_s",
                 "transfer_s", "wait_s", "input_s", "cpu_s_per_1k_samples", "rss_peak_max_bytes", "processes",
                 "replicas_per_process", "memory_per_replica_bytes", "sync_s", "global_batch", "per_worker_batch",
                 "run_ids"]


@dataclass(frozen=True)
class SweepRun:
    """One run a sweep started: its role, round and worker count, and how it ended."""

    run_id: str
    round: int  # 1-based
    role: str  # BASELINE, POINT or PROBE
    workers: int  # a probe: the count whose per-worker batch its one worker ran
    status: str = "running"  # running | complete | failed | interrupted
    error: str | None = None
    way: str | None = None  # replicas | workers | ps; None: the baseline, or a sweep recorded before --ways

    @property
    def kind(self) -> str:
        """The way of a point ("workers" where sweep.json has none: recorded before --ways)."""
        return self.way or WORKERS


@dataclass(frozen=True)
class SweepRecord:
    """``sweep.json``: what the sweep was asked to run, and each run in the order it started."""

    sweep_id: str
    counts: tuple[int, ...]
    repeats: int
    scaling: str  # strong | weak
    cores_per_worker: float | None  # None: plain local workers on the whole machine
    preset: str
    batch_size: int  # the global batch of one worker (strong: of every count)
    reference: str  # BASELINE (the single-mode runs) or POINT (the one-worker runs of a scale model)
    started: str
    status: str = "running"  # running | complete | interrupted | failed
    ended: str | None = None
    gradient_bytes: float | None = None
    runs: tuple[SweepRun, ...] = field(default_factory=tuple)
    ways: tuple[str, ...] = (WORKERS,)  # a sweep recorded before --ways: workers

    def with_run(self, run: SweepRun) -> SweepRecord:
        """The record with ``run`` added, or replacing the entry of the same run id."""
        others = [r for r in self.runs if r.run_id != run.run_id]
        at = next((i for i, r in enumerate(self.runs) if r.run_id == run.run_id), len(others))
        return replace(self, runs=tuple(others[:at] + [run] + others[at:]))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["counts"], d["runs"], d["ways"] = list(self.counts), [asdict(r) for r in self.runs], list(self.ways)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SweepRecord:
        fields = dict(d)
        fields["counts"] = tuple(int(n) for n in fields["counts"])
        fields["ways"] = tuple(str(w) for w in fields.get("ways") or (WORKERS,))
        fields["runs"] = tuple(SweepRun(**r) for r in fields.get("runs", ()))
        return cls(**fields)

    def save(self, sweep_dir: Path) -> None:
        write_json(Path(sweep_dir) / SWEEP_FILE, self.to_dict())  # atomic: a reader never sees half a file


def load_sweep(sweep_dir: Path) -> SweepRecord:
    path = Path(sweep_dir) / SWEEP_FILE
    try:
        return SweepRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise ResultsError(f"{sweep_dir}: not a sweep directory (no readable {SWEEP_FILE}: "
                           f"{exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ResultsError(f"{path}: not a sweep record ({exc})") from None


def is_sweep_dir(path: Path) -> bool:
    return (Path(path) / SWEEP_FILE).is_file()


@dataclass(frozen=True)
class ScalingStudy:
    """A sweep analysed: per run, per point, and the forecast (``forecast``)."""

    record: SweepRecord
    runs: pd.DataFrame  # RUN_COLUMNS
    points: pd.DataFrame  # POINT_COLUMNS, the reference first
    forecast: pd.DataFrame  # forecast.FORECAST_COLUMNS
    terms: pd.DataFrame  # forecast.TERM_COLUMNS: the fitted step-time model
    notes: tuple[str, ...] = ()


def study(sweep_dir: Path, beyond: Sequence[int] | None = None, hosts: ClusterSpec | None = None) -> ScalingStudy:
    """The sweep in ``sweep_dir`` analysed; ``beyond``: worker counts to forecast (default: 2x and 4x the
    largest count run); ``hosts``: a cluster to forecast too."""
    from perfkit.analysis.scaling.forecast import forecast
    from perfkit.analysis.scaling.ways import notes as way_notes

    sweep_dir = Path(sweep_dir)
    record = load_sweep(sweep_dir)
    runs, notes = run_table(record, sweep_dir.parent)
    points = point_table(runs, record)
    done = _done(runs)
    workers = sorted(n for n, w in done if w == WORKERS)
    targets = sorted(set(workers) | set(beyond or (default_targets(workers) if workers else [])))
    fc, terms, fc_notes = forecast(runs, record, targets, hosts)
    status = record.status if record.status != "running" else "running (or cut short)"
    missing = [f"{n} {w}" for n in record.counts for w in record.ways
               if (n, w) not in done and not (w == "replicas" and n == 1)]
    if missing:
        notes.append(f"partial curve: sweep {status}; no complete run for {', '.join(missing)}")
    return ScalingStudy(record, runs, points, fc, terms, tuple(notes + way_notes(record.ways) + fc_notes))


def default_targets(counts: Sequence[int]) -> tuple[int, ...]:
    """The counts forecast where none are named: twice and four times the largest count run."""
    return 2 * max(counts), 4 * max(counts)


def _done(runs: pd.DataFrame) -> set[tuple[int, str]]:
    """(count, way) of every complete point run."""
    pts = runs[runs["role"] == POINT] if not runs.empty else runs
    return {(int(n), way_of(w)) for n, w in zip(pts["workers"], pts["way"])} if not pts.empty else set()


def way_of(value: Any) -> str:
    """A run row's way: "workers" where none is recorded (a sweep from before --ways, or a hand-made row)."""
    return value if isinstance(value, str) and value else WORKERS


def run_table(record: SweepRecord, results_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    """RUN_COLUMNS for each complete run of the sweep, speedups against the reference."""
    from perfkit.analysis.analyze import analyze

    notes: list[str] = []
    done = [r for r in record.runs if r.status == "complete" and (results_dir / r.run_id).is_dir()]
    failed = [r for r in record.runs if r.status in ("failed", "interrupted")]
    notes += [f"{r.run_id} ({_what(r)}, round {r.round}) {r.status}: {r.error or 'no reason recorded'}"
              for r in failed]
    probes, done = [r for r in done if r.role == PROBE], [r for r in done if r.role != PROBE]
    if not done:  # probes alone are no curve
        return pd.DataFrame(columns=RUN_COLUMNS), notes + ["no complete run in the sweep yet"]
    refs = [r for r in done if _is_reference(r, record)]
    a = analyze([results_dir / r.run_id for r in done], results_dir, refs[0].run_id if refs else None)
    rows = [_run_row(r, a, results_dir) for r in done if r.run_id in set(a.runs["run_id"])]
    rows += _probe_rows(probes, results_dir, notes)
    left = [r.run_id for r in done if r.run_id not in set(a.runs["run_id"])]
    if left:
        notes.append(f"left out by the analysis: {', '.join(left)}")
    runs = pd.DataFrame(rows, columns=RUN_COLUMNS)
    ref_rate = runs.loc[runs["run_id"].isin([r.run_id for r in refs]), "rate"].mean()
    if not refs:
        notes.append("no complete reference run: speedups are unknown")
    runs["speedup"] = runs["rate"] / ref_rate if refs else math.nan
    runs.loc[runs["role"] == PROBE, "speedup"] = math.nan  # one worker on a share of the batch: no speedup
    return runs, notes


def _what(run: SweepRun) -> str:
    return f"a probe at the batch of {run.workers}" if run.role == PROBE else f"{run.workers} {run.kind}"


def _is_reference(run: SweepRun, record: SweepRecord) -> bool:
    if record.reference == BASELINE:
        return run.role == BASELINE
    return run.role == POINT and run.workers == 1 and run.kind == WORKERS


def _run_row(run: SweepRun, a: Any, results_dir: Path) -> dict[str, Any]:
    from perfkit.analysis.scaling.measure import steady_run
    from perfkit.analysis.scaling.ways import way_figures

    row = a.runs.set_index("run_id").loc[run.run_id]
    meta = load_meta(results_dir / run.run_id)
    gb = int((meta.config or {}).get("batch_size") or 0)
    plan = meta.plan()
    epochs = a.epochs[a.epochs["run_id"] == run.run_id] if not a.epochs.empty else pd.DataFrame()
    steady = epochs.iloc[1:] if len(epochs) > 1 else epochs
    train_s = float(np.median(steady["train_s"])) if len(steady) else math.nan
    val_s = float(np.median(steady["val_s"])) if len(steady) else math.nan
    samples = float(row["steady_epoch_samples"])
    steps = int(plan.steps_per_epoch or (samples / gb if gb and samples > 0 else 0)) or math.nan
    step_s = train_s / steps if steps == steps else math.nan
    epoch_s = float(row["steady_epoch_s"])
    rate = samples / epoch_s if samples > 0 else 1.0 / epoch_s
    way = run.kind if run.role == POINT else None
    clean = steady_run(RunRecord.load(results_dir / run.run_id))
    per_worker = gb if way == "ps" else gb / run.workers  # a ps worker takes a whole batch a step
    return {"run_id": run.run_id, "round": run.round, "role": run.role, "way": way, "workers": run.workers,
            "global_batch": gb, "per_worker_batch": per_worker if run.role == POINT else gb, "steps": steps,
            "steady_epoch_s": epoch_s, "train_s": train_s, "val_s": val_s, "epoch_samples": samples,
            "step_s": step_s, **_split(a, run, step_s), "cpu_s_per_1k_samples": float(row["cpu_s_per_1k_samples"]),
            "rss_peak_max_bytes": float(row["rss_peak_max_bytes"]),
            **way_figures(a, run.run_id, meta, way, run.workers), "rate": rate, "speedup": math.nan,
            "clean_step_s": clean.step_s, "clean_step_cv": clean.step_cv, "clean_val_s": clean.val_s,
            "val_steps": plan.validation_steps, "machine_cores": clean.machine_cores,
            "worker_cores": clean.worker_cores, "other_cores": clean.other_cores}


def _probe_rows(probes: list[SweepRun], results_dir: Path, notes: list[str]) -> list[dict[str, Any]]:
    rows = []
    for r in probes:
        try:
            rows.append(_probe_row(r, results_dir))
        except PerfkitError as exc:  # an unreadable probe: said, and its count forecast as without one
            notes.append(f"{r.run_id} ({_what(r)}) left out: {str(exc).splitlines()[0]}")
    return rows


def _probe_row(run: SweepRun, results_dir: Path) -> dict[str, Any]:
    """A probe's row: its clean step and machine, what the forecast takes from it. Not analysed beside the
    points: its data is a few dozen batches of its own, which ``analyze`` rightly keeps out of a comparison."""
    from perfkit.analysis.scaling.measure import steady_run

    record = RunRecord.load(results_dir / run.run_id)
    gb = int((record.run.config or {}).get("batch_size") or 0)
    clean = steady_run(record)
    return {**{c: math.nan for c in RUN_COLUMNS}, "run_id": run.run_id, "round": run.round, "role": PROBE,
            "way": None, "workers": run.workers, "global_batch": gb, "per_worker_batch": gb,
            "steps": record.run.plan().steps_per_epoch or math.nan, "step_s": clean.step_s,
            "compute_s": clean.step_s, "transfer_s": 0.0, "wait_s": 0.0, "split_source": None,
            "clean_step_s": clean.step_s, "clean_step_cv": clean.step_cv, "clean_val_s": clean.val_s,
            "machine_cores": clean.machine_cores, "worker_cores": clean.worker_cores,
            "other_cores": clean.other_cores}


def _split(a: Any, run: SweepRun, step_s: float) -> dict[str, Any]:
    """The steady step shared out as the run's split shares its mean step (NaN terms: no split)."""
    w = a.workers[a.workers["run_id"] == run.run_id] if not a.workers.empty else pd.DataFrame()
    # One replica has nothing to wait for and nothing to all-reduce with; a ps worker, even alone, pushes
    # and pulls through the parameter server inside its step (no trace window: no split)
    if run.role == BASELINE or (run.workers == 1 and run.kind != "ps"):
        return {"compute_s": step_s, "transfer_s": 0.0, "wait_s": 0.0, "input_s": math.nan, "split_source": None}
    terms = ("compute_s", "transfer_s", "wait_s", "input_s")
    if w.empty or any(t not in w for t in terms) or w["transfer_s"].isna().all():
        return {"compute_s": math.nan, "transfer_s": math.nan, "wait_s": math.nan, "input_s": math.nan,
                "split_source": None}
    means = {t: float(w[t].mean()) for t in terms}
    means = {t: (v if v == v else 0.0) for t, v in means.items()}  # no input term (an estimate): folded in
    total = sum(means.values())  # busy + collective + input: the split's step (stragglers.py)
    if not total > 0:
        return {"compute_s": math.nan, "transfer_s": math.nan, "wait_s": math.nan, "input_s": math.nan,
                "split_source": None}
    share = {t: v / total for t, v in means.items()}
    inp = share["input_s"]
    out = {k: share[k] * step_s for k in ("transfer_s", "wait_s", "input_s")}
    out["compute_s"] = (1 - share["transfer_s"] - share["wait_s"] - inp) * step_s
    out["split_source"] = str(w["split_source"].iloc[0]) if "split_source" in w else None
    return out


def point_table(runs: pd.DataFrame, record: SweepRecord) -> pd.DataFrame:
    """POINT_COLUMNS: the single-mode baseline (when the sweep has one), then each way's counts (the ways in
    the order replicas, workers, ps)."""
    from perfkit.analysis.scaling.ways import WAYS, point_name

    if runs.empty:
        return pd.DataFrame(columns=POINT_COLUMNS)
    pts = runs[runs["role"] == POINT]
    ways = pts["way"].map(way_of)
    groups = [(point_name(None, 1), None, 1, runs[runs["role"] == BASELINE])]
    groups += [(point_name(w, int(n)), w, int(n), g) for w in WAYS
               for n, g in pts[ways == w].groupby("workers", sort=True)]
    return pd.DataFrame([_point(name, w, n, g) for name, w, n, g in groups if not g.empty], columns=POINT_COLUMNS)


def _point(name: str, way: str | None, n: int, g: pd.DataFrame) -> dict[str, Any]:
    s = g["speedup"].astype(float)
    mean = lambda col: float(g[col].astype(float).mean())  # noqa: E731 - one figure per column
    return {"point": name, "way": way, "workers": n, "runs": len(g), "speedup": float(s.mean()),
            "speedup_lo": float(s.min()), "speedup_hi": float(s.max()),
            "speedup_sd": float(s.std()) if len(s) > 1 else math.nan,
            "efficiency": float(s.mean()) / n, "efficiency_lo": float(s.min()) / n,
            "efficiency_hi": float(s.max()) / n, "ideal_speedup": float(n),
            **{c: mean(c) for c in ("steady_epoch_s", "step_s", "compute_s", "transfer_s", "wait_s", "input_s",
                                    "cpu_s_per_1k_samples", "rss_peak_max_bytes", "processes",
                                    "replicas_per_process", "memory_per_replica_bytes", "sync_s", "global_batch",
                                    "per_worker_batch")},
            "run_ids": " ".join(g["run_id"])}
