"""The run directory: create it, write its files atomically, load it back, list runs.

Layout (see docs/figures.md): ``run.json``, ``workers/<i>/{steps,epochs}.parquet``, ``workers/<i>/worker.log``,
``cpu.parquet``, ``system.parquet``; once a run has been analysed, its parsed traces (a cache:
``trace_steps.parquet``, ``trace_ops.parquet``, ``trace_cache.json``). Every file is written to a temp file
in the same directory and renamed into place, so a crash or Ctrl-C never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfkit._atomic import atomic_write, write_error
from perfkit.config import sanitize_id
from perfkit.errors import ResultsError, UsageError
from perfkit.runmeta import SCHEMA_VERSION, RunMeta

if TYPE_CHECKING:
    import pandas as pd
# pandas is imported where a table is read: run.json alone (`perfkit runs`, every command's start, the
# launcher) needs none of it, and its import is ~0.35 s on a 2-core machine.

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


# The run record's types (RunMeta, ClusterRecord, WorkerRecord): perfkit/runmeta.py.


def write_run_file(run_dir: Path, meta: RunMeta | dict[str, Any]) -> None:
    """run.json of a record written whole (``RunRecord.save``, a part brought back from a host): what it
    writes always reads back as a ``RunMeta``; given as a dict, a field of the wrong type fails here, in the
    writer, not in an analysis."""
    typed = meta if isinstance(meta, RunMeta) else RunMeta.parse(meta, str(run_dir / RUN_FILE))
    write_json(run_dir / RUN_FILE, typed.to_dict())


class RunDir:
    """A run directory being written by a live run: it holds the run's ``RunMeta`` and writes it to run.json
    on every change; ``RunRecord`` reads."""

    def __init__(self, path: Path, meta: RunMeta) -> None:
        self.path = path
        self._meta = meta

    @staticmethod
    def path_for(results_dir: Path, run_id: str) -> Path:
        path = Path(results_dir) / sanitize_id(run_id)
        if path.exists():
            raise UsageError(f"--run-id: {path} already exists; choose another run id")
        return path

    @classmethod
    def create(cls, results_dir: Path, run_id: str, meta: RunMeta) -> RunDir:
        """The directory ``run_id`` of a new run and its run.json: ``meta`` (``RunMeta.new``), running. The
        record keeps its own run id (one host's part of a run is ``<run id>--<host>``), else the directory's."""
        path = cls.path_for(results_dir, run_id)
        run = cls(path, replace(meta, schema_version=SCHEMA_VERSION, run_id=meta.run_id or path.name, status="running",
                                started=utc_now(), ended=None, error=None))
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
    def meta(self) -> RunMeta:
        return self._meta

    def update(self, **changes: Any) -> None:
        """run.json with ``changes`` (``RunMeta.changed``: each field its own type)."""
        self._meta = self._meta.changed(**changes)
        self._write()

    def _write(self) -> None:
        write_json(self.path / RUN_FILE, self._meta.to_dict())

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
        raise unreadable_parquet(path, exc) from None
    require_columns(path, df.columns, columns)
    for c in text:
        if c in df.columns and isinstance(df[c].dtype, pd.CategoricalDtype):
            df[c] = df[c].cat.set_categories(sorted(df[c].cat.categories))
    return df


def unreadable_parquet(path: Path, exc: BaseException) -> ResultsError:
    """The one-line error of a Parquet file pyarrow could not read (it raises several types for one)."""
    return ResultsError(f"{path}: unreadable Parquet file ({exc.__class__.__name__})")


def require_columns(path: Path, present: Any, columns: tuple[str, ...]) -> None:
    """Raise ResultsError naming ``path`` and every one of ``columns`` not ``present``."""
    missing = [c for c in columns if c not in present]
    if missing:
        raise ResultsError(f"{path}: missing columns {', '.join(missing)}")


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

    def save(self) -> None:
        """Write this record as the run directory ``load`` reads back: run.json, each worker's steps and epochs
        (``workers/<i>/``), the CPU and system samples; a table without rows is not written (read back empty).
        For a record made whole at once (synthetic runs, fixtures); a live run writes through ``RunDir``."""
        for name, frame in (("steps.parquet", self.steps), ("epochs.parquet", self.epochs)):
            for worker, rows in frame.groupby("worker", sort=True):
                write_parquet(self.path / "workers" / str(int(worker)) / name,
                              rows.drop(columns="worker").reset_index(drop=True))
        for name, frame in (("cpu.parquet", self.cpu), ("system.parquet", self.system)):
            if len(frame):
                write_parquet(self.path / name, frame)
        write_run_file(self.path, self.run)

    @classmethod
    def load(cls, path: str | Path, samples: bool = True) -> RunRecord:
        """The run at ``path``; ``samples`` False leaves its CPU and system samples unread (empty tables): a
        listing's figures need none of them, and on a long run of many workers they are most of its rows."""
        path = Path(path)
        return cls(
            path=path,
            run=_read_meta(path),
            steps=_worker_frames(path, "steps.parquet", STEP_COLUMNS),
            epochs=_worker_frames(path, "epochs.parquet", EPOCH_COLUMNS),
            cpu=_read_frame(path / "cpu.parquet" if samples else path / ".unread", CPU_COLUMNS, CPU_TEXT),
            system=_read_frame(path / "system.parquet" if samples else path / ".unread", SYSTEM_COLUMNS),
        )


# A run on SSH hosts, mirrored on the launching host while it trains (``perfkit watch``): each worker's
# status, heartbeat and process under ``<results>/.live/<run id>/``; removed when the parts come back.
LIVE_DIR = ".live"


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
