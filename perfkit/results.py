"""The run directory: create it, write its files atomically, load it back, list runs.

Layout (see docs/figures.md): ``run.json``, ``workers/<i>/{steps,epochs}.parquet``, ``workers/<i>/worker.log``,
``cpu.parquet``, ``system.parquet``; once a run has been analysed, its parsed traces (a cache:
``trace_steps.parquet``, ``trace_ops.parquet``, ``trace_cache.json``). Every file is written to a temp file
in the same directory and renamed into place, so a crash or Ctrl-C never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfkit._atomic import atomic_write, write_error
from perfkit.config import sanitize_id
from perfkit.errors import ResultsError, UsageError

if TYPE_CHECKING:
    import pandas as pd
# pandas is imported where a table is read: run.json alone (`perfkit runs`, every command's start, the
# launcher) needs none of it, and its import is ~0.35 s on a 2-core machine.

SCHEMA_VERSION = 1
STATUSES = ("running", "complete", "failed", "interrupted")
RUN_FILE = "run.json"
# Parsed from the profiler captures at analysis time and cached beside run.json (perfkit.analysis.tracetables)
TRACE_STEPS_FILE = "trace_steps.parquet"
TRACE_OPS_FILE = "trace_ops.parquet"
TRACE_CACHE_FILE = "trace_cache.json"  # what the cached tables were parsed from, and by which parser
RESERVE_FILE = ".reserve"  # space held while a run is live, for its final run.json on a disk that filled
RESERVE_BYTES = 256 * 1024

STEP_COLUMNS = ("epoch", "step", "t_start_ns", "t_end_ns", "duration_s", "samples")
EPOCH_COLUMNS = ("epoch", "t_start_ns", "t_end_ns", "train_s", "val_s")
CPU_COLUMNS = ("t_ns", "worker", "host", "pid", "role", "cpu_percent", "rss_bytes", "num_threads")
CPU_TEXT = ("host", "role")  # loaded as categories: a few distinct values over millions of samples
SYSTEM_COLUMNS = ("t_ns", "core", "busy_percent")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_json(path: Path, obj: Any) -> None:
    text = json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n"
    atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    atomic_write(path, lambda fh: df.to_parquet(fh, index=False))


def new_run_id(mode: str, label: str | None = None, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    parts = [stamp, mode] + ([sanitize_id(label, "--label")] if label else [])
    return "-".join(parts)


# -- the run record (run.json), typed ----------------------------------------------------------------
# Frozen dataclasses, not pydantic: the project's records are frozen dataclasses throughout, the types
# needed are few and flat, and a validation library would be a new dependency for one file. What this
# version does not know (a newer writer's keys, a bench's own) is kept in ``extra`` and written back.


def _field(d: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = d.get(name)
    if value is None or (isinstance(value, kind) and not (isinstance(value, bool) and bool not in _kinds(kind))):
        return value
    names = "/".join(k.__name__ for k in _kinds(kind))
    raise ResultsError(f"{where}: {name} is {type(value).__name__} {value!r:.40}, not {names}")


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _mapping(d: Mapping[str, Any], name: str, where: str) -> dict[str, Any]:
    return dict(_field(d, name, dict, where) or {})


@dataclass(frozen=True)
class WorkerRecord:
    """One worker process as run.json records it (``workers[]``)."""

    index: int
    host: str | None = None
    pid: int | None = None
    role: str | None = None
    endpoint: str | None = None
    anchor_wall_ns: int | None = None  # the same instant on the wall clock and on ``time.monotonic_ns``
    anchor_mono_ns: int | None = None
    exit_code: int | None = None
    state: str | None = None
    profile: dict[str, Any] | None = None  # its trace capture (status, window, file, attempts)
    calibration: dict[str, Any] | None = None  # all-reduce timings after training
    plan: dict[str, Any] | None = None  # what perfkit.record learnt from fit: epochs, steps, global batch
    started_wall_ns: int | None = None  # the process's start (the kernel's), to 10 ms
    phases: tuple[dict[str, Any], ...] = ()  # each state it reported: state, t_wall_ns, cpu_s (status.json)
    teardown: dict[str, Any] | None = None  # its last step to its exit: s, where, stopped (trainer/teardown.py)
    died: dict[str, Any] | None = None  # a ParameterServerStrategy worker dead mid-run (trainer/lostworkers.py)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, d: Any, where: str) -> WorkerRecord:
        if not isinstance(d, dict) or not isinstance(d.get("index"), int):
            raise ResultsError(f"{where}: a worker entry without an integer index: {d!r:.60}")
        ints = {k: _field(d, k, int, where)
                for k in ("pid", "anchor_wall_ns", "anchor_mono_ns", "exit_code", "started_wall_ns")}
        texts = {k: _field(d, k, str, where) for k in ("host", "role", "endpoint", "state")}
        maps = {k: _field(d, k, dict, where) for k in ("profile", "calibration", "plan", "teardown", "died")}
        phases = tuple(p for p in _field(d, "phases", list, where) or () if isinstance(p, dict))
        known = {"index", "phases", *ints, *texts, *maps}
        return cls(index=d["index"], **ints, **texts, **maps, phases=phases,
                   extra={k: v for k, v in d.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if k != "extra"}
        return {**out, **self.extra}

    @property
    def clock_offset_ns(self) -> int | None:
        """wall - monotonic on this worker's host (its anchor: one instant read on both clocks); every clock
        conversion of the analysis goes through it. None: not recorded."""
        if not self.anchor_wall_ns or self.anchor_mono_ns is None:
            return None
        return self.anchor_wall_ns - self.anchor_mono_ns


@dataclass(frozen=True)
class ClusterRecord:
    """Where the workers ran (``cluster``): hosts with their cores, each worker's host and endpoint, the
    CPU budgets applied."""

    num_workers: int | None = None
    hosts: tuple[dict[str, Any], ...] = ()
    workers: tuple[dict[str, Any], ...] = ()
    tasks: tuple[dict[str, Any], ...] = ()  # every process with its role and task (runs before ps mode: none)
    local_workers: tuple[int, ...] = ()
    emulated: bool = False
    cpu_budget: dict[str, Any] = field(default_factory=dict)
    declared: dict[str, Any] | None = None  # the cluster file's hosts when the runtime one differs
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, d: Any, where: str) -> ClusterRecord:
        if not isinstance(d, dict):
            return cls()
        lists = {k: tuple(_field(d, k, list, where) or ()) for k in ("hosts", "workers", "tasks", "local_workers")}
        known = {"num_workers", "emulated", "cpu_budget", "declared", *lists}
        return cls(num_workers=_field(d, "num_workers", int, where), emulated=bool(_field(d, "emulated", bool, where)),
                   cpu_budget=_mapping(d, "cpu_budget", where), declared=_field(d, "declared", dict, where), **lists,
                   extra={k: v for k, v in d.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if k != "extra"}
        return {**out, **self.extra}

    def host_of(self) -> dict[int, str]:
        """Task index -> host: every worker, and under ParameterServerStrategy its servers and chief too."""
        return {int(w["index"]): str(w.get("host")) for w in self.tasks or self.workers
                if isinstance(w, dict) and "index" in w}


# Top-level keys with a type; everything else a writer puts in run.json is carried in ``extra``.
_TEXT = ("run_id", "status", "started", "ended", "error", "mode", "strategy", "preset", "clock")
_MAPS = ("config", "workload", "data", "part", "profile", "launch", "network", "sampler", "failure", "verifies",
         "worker_start", "clock_anchor")


@dataclass(frozen=True)
class RunMeta:
    """run.json: what ran, where, how it ended. Written only through ``RunDir``; read with ``parse``."""

    schema_version: int
    run_id: str
    status: str = "unknown"
    started: str | None = None
    ended: str | None = None
    error: str | None = None
    mode: str | None = None  # single | multi | ps
    strategy: str | None = None
    preset: str | None = None  # None: a user's own command (perfkit launch, perfkit.record)
    clock: str | None = None  # "wall" once the loader moved merged parts onto the wall clock
    config: dict[str, Any] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    part: dict[str, Any] = field(default_factory=dict)  # this host's part of a run: name, workers
    profile: dict[str, Any] = field(default_factory=dict)
    launch: dict[str, Any] = field(default_factory=dict)  # perfkit launch: the command, whether it recorded
    network: dict[str, Any] = field(default_factory=dict)
    sampler: dict[str, Any] = field(default_factory=dict)
    failure: dict[str, Any] = field(default_factory=dict)
    verifies: dict[str, Any] = field(default_factory=dict)  # a --verify run: the prediction it checks
    worker_start: dict[str, Any] = field(default_factory=dict)  # forked from the fork server, or exec'd
    # The launcher's own anchor (wall_ns, mono_ns): a part whose processes record nothing (a parameter-server
    # script's servers) still lines up its CPU samples with the other parts by it.
    clock_anchor: dict[str, Any] = field(default_factory=dict)
    cluster: ClusterRecord = field(default_factory=ClusterRecord)
    workers: tuple[WorkerRecord, ...] = ()
    parts: tuple[str, ...] = ()
    restarts: tuple[dict[str, Any], ...] = ()
    command_started_wall_ns: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, d: Any, where: str) -> RunMeta:
        if not isinstance(d, dict) or not isinstance(d.get("schema_version"), int):
            raise ResultsError(f"{where}: not a perfkit run record (no integer schema_version)")
        texts = {k: _field(d, k, str, where) for k in _TEXT}
        maps = {k: _mapping(d, k, where) for k in _MAPS}
        workers = tuple(WorkerRecord.parse(w, where) for w in _field(d, "workers", list, where) or ())
        known = {"schema_version", "cluster", "workers", "parts", "restarts", "command_started_wall_ns", *texts, *maps}
        return cls(schema_version=d["schema_version"], **{**texts, "run_id": texts["run_id"] or Path(where).parent.name,
                                                          "status": texts["status"] or "unknown"}, **maps,
                   cluster=ClusterRecord.parse(d.get("cluster"), where), workers=workers,
                   parts=tuple(str(p) for p in _field(d, "parts", list, where) or ()),
                   restarts=tuple(_field(d, "restarts", list, where) or ()),
                   command_started_wall_ns=_field(d, "command_started_wall_ns", int, where),
                   extra={k: v for k, v in d.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": self.schema_version}
        for f in fields(self):
            if f.name in ("schema_version", "extra"):
                continue
            value = getattr(self, f.name)
            if f.name == "cluster":
                value = value.to_dict() if value != ClusterRecord() else None
            elif f.name == "workers":
                value = [w.to_dict() for w in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value if value != {} else None
        return {**out, **self.extra}

    @property
    def num_workers(self) -> int:
        n = self.cluster.num_workers
        return n if isinstance(n, int) and n > 0 else max(1, len(self.workers))

    @property
    def chief_index(self) -> int | None:
        """The chief's task index under ParameterServerStrategy (its process records the epochs)."""
        return next((w.index for w in self.workers if w.role == "chief"), None)

    def plan(self) -> dict[str, Any]:
        """What the run's fit said of itself (steps per epoch, parameters): run.json's ``plan``, or a worker's."""
        return dict(self.extra.get("plan") or next((w.plan for w in self.workers if w.plan), None) or {})

    def worker(self, index: int) -> WorkerRecord | None:
        return next((w for w in self.workers if w.index == index), None)


def write_run_file(run_dir: Path, meta: dict[str, Any]) -> None:
    """The one writer of run.json (a live run's ``RunDir``, synthetic runs, fixtures): what it writes always
    reads back as a ``RunMeta``; a field of the wrong type fails here, in the writer, not in an analysis."""
    write_json(run_dir / RUN_FILE, RunMeta.parse(meta, str(run_dir / RUN_FILE)).to_dict())


class RunDir:
    """A run directory being written by a live run. It writes; ``RunRecord`` reads."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = path
        self._meta = dict(meta)

    @staticmethod
    def path_for(results_dir: Path, run_id: str) -> Path:
        path = Path(results_dir) / sanitize_id(run_id)
        if path.exists():
            raise UsageError(f"--run-id: {path} already exists; choose another run id")
        return path

    @classmethod
    def create(cls, results_dir: Path, run_id: str, meta: dict[str, Any]) -> RunDir:
        path = cls.path_for(results_dir, run_id)
        full = {"schema_version": SCHEMA_VERSION, "run_id": path.name, "status": "running",
                "started": utc_now(), "ended": None, "error": None, **meta}
        run = cls(path, full)
        try:
            path.mkdir(parents=True)
            run._write()
        except OSError as exc:  # a full or read-only results disk: nothing has started yet
            raise ResultsError(f"--results-dir: {write_error(exc)}") from None
        run._reserve()
        return run

    def _reserve(self) -> None:
        """Hold some space for run.json's last write: a disk that fills during the run still gets to say
        how the run ended (``release_reserve`` just before). None held on a disk already that full."""
        try:
            fd = os.open(self.path / RESERVE_FILE, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            finally:
                os.close(fd)
        except (OSError, AttributeError):
            self.release_reserve()

    def release_reserve(self) -> None:
        release_reserve(self.path)

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self._meta)

    def update(self, **changes: Any) -> None:
        self._meta.update(changes)
        self._write()

    def _write(self) -> None:
        write_run_file(self.path, self._meta)

    def finish(self, status: str, error: str | None = None, **changes: Any) -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        self.release_reserve()
        self.update(status=status, error=error, ended=utc_now(), **changes)

    def worker_dir(self, index: int) -> Path:
        d = self.path / "workers" / str(index)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def write_frame(self, relpath: str, df: pd.DataFrame) -> None:
        write_parquet(self.path / relpath, df)


def release_reserve(run_dir: Path) -> None:
    """Free the space ``RunDir`` held for the run's last write (by its launcher, or by the run's janitor)."""
    try:
        (run_dir / RESERVE_FILE).unlink(missing_ok=True)
    except OSError:  # read-only: nothing can be written anyway
        pass


def _read_meta(path: Path) -> RunMeta:
    run_file = path / RUN_FILE
    if not run_file.is_file():
        raise ResultsError(f"{path}: not a perfkit run (no {RUN_FILE})")
    try:
        meta = json.loads(run_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{run_file}: unreadable run record ({exc.__class__.__name__}: {exc})") from None
    version = meta.get("schema_version") if isinstance(meta, dict) else None
    if not isinstance(version, int):
        raise ResultsError(f"{run_file}: not a perfkit run record (no integer schema_version)")
    if version > SCHEMA_VERSION:
        raise ResultsError(f"{run_file}: schema_version {version} is newer than this perfkit reads "
                           f"({SCHEMA_VERSION}); upgrade perfkit")
    return RunMeta.parse(meta, str(run_file))


def _read_frame(path: Path, columns: tuple[str, ...], text: tuple[str, ...] = ()) -> pd.DataFrame:
    """``text``: columns of few distinct strings, read as categories straight from Parquet's dictionary
    (10M CPU samples: 0.7 s, where strings then a category took 1.6 s), their categories sorted as
    ``astype("category")`` sorts them."""
    import pandas as pd

    if not path.is_file():
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
    try:
        df = pd.read_parquet(path, read_dictionary=list(text)) if text else pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        raise ResultsError(f"{path}: unreadable Parquet file ({exc.__class__.__name__})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ResultsError(f"{path}: missing columns {', '.join(missing)}")
    for c in text:
        if c in df.columns and isinstance(df[c].dtype, pd.CategoricalDtype):
            df[c] = df[c].cat.set_categories(sorted(df[c].cat.categories))
    return df


def _worker_frames(path: Path, name: str, columns: tuple[str, ...]) -> pd.DataFrame:
    import pandas as pd

    frames = []
    for wdir in sorted((path / "workers").glob("*"), key=lambda p: (len(p.name), p.name)):
        if wdir.name.isdigit() and (wdir / name).is_file():
            df = _read_frame(wdir / name, columns)
            frames.append(df.assign(worker=int(wdir.name)))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in ("worker", *columns)})
    return pd.concat(frames, ignore_index=True)


@dataclass(frozen=True)
class RunRecord:
    """A frozen run loaded from disk: its run.json and its tables (workers concatenated)."""

    path: Path
    run: RunMeta
    steps: pd.DataFrame
    epochs: pd.DataFrame
    cpu: pd.DataFrame
    system: pd.DataFrame

    @property
    def meta(self) -> dict[str, Any]:
        """run.json as a plain dict (what a benchmark stores beside its figures)."""
        return self.run.to_dict()

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def status(self) -> str:
        return self.run.status

    @classmethod
    def load(cls, path: str | Path) -> RunRecord:
        path = Path(path)
        return cls(
            path=path,
            run=_read_meta(path),
            steps=_worker_frames(path, "steps.parquet", STEP_COLUMNS),
            epochs=_worker_frames(path, "epochs.parquet", EPOCH_COLUMNS),
            cpu=_read_frame(path / "cpu.parquet", CPU_COLUMNS, CPU_TEXT),
            system=_read_frame(path / "system.parquet", SYSTEM_COLUMNS),
        )


def iter_run_dirs(results_dir: str | Path) -> Iterator[Path]:
    """Directories under ``results_dir`` holding a run.json, oldest run id first."""
    root = Path(results_dir)
    if not root.is_dir():
        return
    for child in sorted(root.iterdir()):
        if child.is_dir() and (child / RUN_FILE).is_file():
            yield child


def load_meta(path: str | Path) -> RunMeta:
    """Only run.json, validated: for listings that need no tables."""
    return _read_meta(Path(path))


def is_folder_of_runs(path: Path) -> bool:
    """A directory holding runs (each with a run.json), not itself a run."""
    return path.is_dir() and not (path / RUN_FILE).is_file() and next(iter_run_dirs(path), None) is not None
