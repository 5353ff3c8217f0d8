"""A run's CPU samples as DuckDB tables: read where they lie, aggregated there, small tables handed back.

A long run of many workers holds tens of millions of samples; pandas would hold them whole, several times
over, to compute a few rows per process, worker and host. Here they are loaded into one DuckDB table of
numbers (``perfkit.analysis.cpustore``), and the figures (``perfkit.analysis.cpu``) are queries over it.
Why DuckDB: measured against pandas and Polars on a generated 64-worker run (benchmarks/measurements,
"Analysis at cluster scale"), it was as fast as Polars with the least memory, and it spills to disk past
its memory limit. A record built in memory (a live run, a test) is loaded from its DataFrame the same way.

``cpu_percent`` is the average over the interval since the process's previous sample (100 = one core), so a
sample's CPU-seconds are ``cpu_percent / 100 * dt_s``, ``dt_s`` being the time since the same process's
previous sample; a process's first sample covers one sampler interval (run.json's, else the median
interval, else 0). A process is its pid, or (host, pid) when parts of several hosts were merged, as pids
repeat across machines. The sampler never writes NaN (psutil gives numbers); a NaN read from a file counts
as a missing value, as pandas counts it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from perfkit.analysis.cpustore import CpuFiles, Db, reason, source, tables, unreadable
from perfkit.errors import ResultsError
from perfkit.results import RunMeta, RunRecord

CPU_TABLE_COLUMNS = ["worker", "host", "samples", "cpu_mean", "cpu_p95", "rss_peak_bytes", "threads_max"]


@dataclass(frozen=True, eq=False)
class CpuSamples:
    """The samples of one run in ``db``: table ``samples`` (proc, worker, t_ns, cpu_percent, rss_bytes,
    num_threads, gap: seconds since the process's previous sample), table ``procs`` (proc, worker, host,
    pid, role as of each process's first sample, at ``t_first``) and view ``s`` (samples with ``dt_s``
    and ``cpu_s``)."""

    db: Any
    window: tuple[int, int] | None  # the span figures are taken over; None: no figures
    start_ns: int | None  # the training window's start (first step; a run without steps: first sample)

    @classmethod
    def of(cls, record: RunRecord, whole_life: bool = False, files: CpuFiles | None = None) -> CpuSamples:
        """``record``'s samples (its ``cpu`` frame, or ``files`` when given: the analysis leaves them on
        disk). ``whole_life``: a run without steps (no training window) is taken over every sample."""
        on_disk = files is not None and bool(files.files)
        db = Db(on_disk=on_disk)  # a run on disk may be long: its table compressed, not held whole
        raw, batches = source(db.con, files.files if on_disk else None, record.cpu)  # type: ignore[union-attr]
        try:
            tables(db.con, raw, len(record.run.parts) > 1, batches)
            dt = _dt(db.con, record.run)
            db.con.execute(f"CREATE VIEW s AS SELECT *, {dt} AS dt_s, cpu_percent / 100.0::DOUBLE * {dt} AS cpu_s "
                           f"FROM samples")
        except Exception as exc:
            if not on_disk or not unreadable(exc):
                raise
            names = ", ".join(str(p) for p, _ in files.files)  # type: ignore[union-attr]
            raise ResultsError(f"{names}: unreadable CPU samples ({reason(exc)})") from None
        window = training_window(record)
        if window is None and whole_life:
            lo, hi = db.con.execute("SELECT min(t_ns), max(t_ns) FROM samples").fetchall()[0]
            window = (int(lo), int(hi)) if lo is not None else None
        return cls(db, window, window[0] if window else None)

    def query(self, sql: str, params: list[Any] | None = None) -> pd.DataFrame:
        return self.db.con.execute(sql, params or []).df()

    @property
    def inside(self) -> str:
        """The SQL condition of a sample within the window."""
        return f"t_ns BETWEEN {int(self.window[0])} AND {int(self.window[1])}" if self.window else "FALSE"

    @functools.cached_property
    def one_process_each(self) -> bool:
        """Whether no worker has two processes: then each sample already is a worker's tick (one process has
        one sample a time), and no (worker, time) group-by of every sample is needed."""
        [(most,)] = self.db.con.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM procs GROUP BY worker)"
                                        ).fetchall()
        return most is None or int(most) <= 1

    def ticks(self, where: str, sums: tuple[str, ...], maxima: tuple[str, ...] = ()) -> str:
        """SQL of one row per worker and sample time among the samples ``where`` selects: its processes'
        ``sums`` columns summed and ``maxima`` columns' largest."""
        if self.one_process_each:
            return f"(SELECT worker, t_ns, {', '.join(sums + maxima)} FROM s WHERE {where})"
        combined = [f"sum({c}) AS {c}" for c in sums] + [f"max({c}) AS {c}" for c in maxima]
        return f"(SELECT worker, t_ns, {', '.join(combined)} FROM s WHERE {where} GROUP BY worker, t_ns)"

    @functools.cached_property
    def per_worker(self) -> pd.DataFrame:
        """Per worker (the launcher, -1, included) over the window: its processes' CPU% summed per sample,
        mean and p95; peak RSS and most threads, summed the same way; the host of its first sample."""
        return self.query(f"""
            WITH ticks AS {self.ticks(self.inside, ("cpu_percent", "rss_bytes", "num_threads"))},
                 hosts AS (SELECT worker, arg_min(host, t_first) AS host FROM procs GROUP BY worker)
            SELECT worker, host, count(*) AS samples, avg(cpu_percent) AS cpu_mean,
                   quantile_cont(cpu_percent, 0.95) AS cpu_p95, max(rss_bytes) AS rss_peak_bytes,
                   max(num_threads) AS threads_max
            FROM ticks LEFT JOIN hosts USING (worker) GROUP BY worker, host ORDER BY worker""")[CPU_TABLE_COLUMNS]

    @functools.cached_property
    def worker_cpu_s(self) -> pd.Series:
        """Worker -> its CPU-seconds over the window (its processes summed), in worker order; the launcher
        left out."""
        df = self.query(f"SELECT worker, coalesce(sum(cpu_s), 0) AS cpu_s FROM s WHERE {self.inside} "
                        f"AND worker >= 0 GROUP BY worker ORDER BY worker")
        return pd.Series(df["cpu_s"].to_numpy(dtype=float), index=pd.Index(df["worker"].to_numpy(dtype="int64"),
                                                                               name="worker"), name="cpu_s")

    def ticks_of(self, worker: int) -> pd.DataFrame:
        """One worker's every sample time (not only the window's): its processes' CPU-seconds summed, the
        longest interval among them, in time order."""
        ticks = self.ticks(f"worker = {int(worker)}", ("cpu_s",), ("dt_s",))
        return self.query(f"SELECT t_ns, cpu_s, dt_s FROM {ticks} ORDER BY t_ns")

    def counter_points(self, per_process: int | None, workers: set[int] | None = None) -> pd.DataFrame:
        """Each process's samples on the run's clock (worker, host, pid, t_ns, cpu_percent, rss_bytes), in
        process then time order: every one (``per_process`` None), or averaged into ``per_process`` equal time
        bins over the run's span, CPU% their mean and RSS their peak, at each bin's first sample. ``workers``:
        only these workers' processes (and the launchers')."""
        mine = f"WHERE s.worker < 0 OR s.worker IN ({', '.join(str(int(w)) for w in sorted(workers)) or 'NULL'})" \
            if workers is not None else ""
        if per_process is None:
            return self.query(f"""SELECT s.worker, p.host, p.pid, s.t_ns, s.cpu_percent, s.rss_bytes
                                  FROM samples s JOIN procs p USING (proc) {mine} ORDER BY s.proc, s.t_ns""")
        return self.query(f"""
            WITH span AS (SELECT min(t_ns) AS lo, max(t_ns) - min(t_ns) + 1 AS width FROM samples),
                 b AS (SELECT s.proc, s.worker, s.t_ns, s.cpu_percent, s.rss_bytes,
                              CAST(floor((s.t_ns - lo) * {int(per_process)}::DOUBLE / width) AS BIGINT) AS bin
                       FROM samples s, span {mine})
            SELECT min(b.worker) AS worker, p.host, p.pid, min(b.t_ns) AS t_ns, avg(b.cpu_percent) AS cpu_percent,
                   max(b.rss_bytes) AS rss_bytes
            FROM b JOIN procs p USING (proc) GROUP BY b.proc, b.bin, p.host, p.pid ORDER BY b.proc, t_ns""")

    def span_s(self) -> float:
        """First sample to last, plus a nanosecond (the width ``counter_points`` divides into bins)."""
        [(lo, hi)] = self.db.con.execute("SELECT min(t_ns), max(t_ns) FROM samples").fetchall()
        return (int(hi) - int(lo) + 1) / 1e9 if lo is not None else 0.0

    def sample_count(self, workers: set[int] | None = None) -> tuple[int, int]:
        """(samples, processes), of ``workers``' processes and the launchers' when given."""
        mine = f"WHERE worker < 0 OR worker IN ({', '.join(str(int(w)) for w in sorted(workers)) or 'NULL'})" \
            if workers is not None else ""
        [(n, procs)] = self.db.con.execute(f"SELECT count(*), count(DISTINCT proc) FROM samples {mine}").fetchall()
        return int(n), int(procs)

    def command_cpu_s(self) -> float:
        """CPU-seconds of every worker process over every sample (the launcher left out); NaN: none."""
        n, total = self.db.con.execute("SELECT count(*), coalesce(sum(cpu_s), 0) FROM s WHERE worker >= 0"
                                       ).fetchall()[0]
        return float(total) if n else math.nan


def training_window(record: RunRecord) -> tuple[int, int] | None:
    """First step start to last epoch end (monotonic ns), the span CPU figures are taken over."""
    if record.steps.empty:
        return None
    start = int(record.steps["t_start_ns"].min())
    end = int(record.epochs["t_end_ns"].max()) if not record.epochs.empty else int(record.steps["t_end_ns"].max())
    return start, end


def sample_interval_s(meta: RunMeta) -> float:
    value = meta.sampler.get("interval_s") or meta.config.get("sample_interval")
    return float(value) if value else math.nan


def _dt(con: Any, meta: RunMeta) -> str:
    """A sample's interval in SQL: the gap since its process's previous sample; a first sample's is the
    sampler's interval (run.json), else the median gap, else 0."""
    first = sample_interval_s(meta)
    if math.isnan(first):
        (median,) = con.execute("SELECT median(gap) FROM samples").fetchall()[0]
        first = float(median) if median is not None else 0.0
    return f"coalesce(gap, CAST('{first!r}' AS DOUBLE))"


