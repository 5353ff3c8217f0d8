"""How a run's CPU samples get into DuckDB (``perfkit.analysis.cpusamples`` queries them): each part's
cpu.parquet checked, then scanned through an Arrow dataset (no path becomes SQL text, so no character in it
is read as a glob or a quote) or a record's frame; one table ``samples`` of numbers and one ``procs`` of each
process's names, made in a private database folder.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from perfkit.errors import ResultsError
from perfkit.results import CPU_COLUMNS, require_columns, unreadable_parquet

_NUMERIC = ("t_ns", "worker", "pid", "cpu_percent", "rss_bytes", "num_threads")


@dataclass(frozen=True)
class CpuFiles:
    """A run's samples on disk: each part's cpu.parquet and the shift (ns) onto the run's clock."""

    files: tuple[tuple[Path, int], ...] = ()

    def check(self) -> set[int]:
        """Read every part's schema, then every value once (keeping none), and return the workers sampled
        (the launcher, -1, included). A file that cannot be read, lacks a column or holds text where a number
        belongs is a ResultsError naming it: found while the run loads, not midway through its figures."""
        sampled: set[int] = set()
        with Db() as db:
            for i, (path, _) in enumerate(self.files):
                _check_schema(path)
                try:
                    _register_file(db.con, f"part{i}", path)
                    [(workers,)] = db.con.execute(
                        f"SELECT list(DISTINCT worker) FROM (SELECT worker, min(t_ns), max(host), max(pid), max(role), "
                        f"max(cpu_percent), max(rss_bytes), max(num_threads) FROM part{i} GROUP BY worker)").fetchall()
                except Exception as exc:
                    if not unreadable(exc):
                        raise
                    raise ResultsError(f"{path}: unreadable Parquet file ({reason(exc)})") from None
                sampled |= {int(w) for w in workers or () if w is not None}
        return sampled


def _check_schema(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        raise unreadable_parquet(path, exc) from None
    require_columns(path, schema.names, CPU_COLUMNS)
    for c in _NUMERIC:
        kind = schema.field(c).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise ResultsError(f"{path}: cpu column {c} is not numeric")


class Db:
    """A DuckDB database in a private temporary folder (removed with it), never in the working directory,
    which may belong to someone else or be read-only. ``on_disk``: its tables are a file there, stored
    compressed and paged in as queries need them, rather than held whole in memory: a little more time for
    much less memory on a long run (the trade is measured in benchmarks/measurements, "Analysis at cluster
    scale")."""

    def __init__(self, on_disk: bool = False) -> None:
        import duckdb

        self.spill = tempfile.mkdtemp(prefix="perfkit-duckdb-")
        where = str(Path(self.spill) / "samples.duckdb") if on_disk else ":memory:"
        self.con = duckdb.connect(where, config={"temp_directory": self.spill})
        self._done = weakref.finalize(self, _close, self.con, self.spill)

    def __enter__(self) -> Db:
        return self

    def __exit__(self, *exc: object) -> None:
        self._done()


def _close(con: Any, spill: str) -> None:
    con.close()
    shutil.rmtree(spill, ignore_errors=True)


def _register_file(con: Any, name: str, path: Path) -> None:
    """``path`` as the view ``name``, scanned through an Arrow dataset: no path is written into SQL."""
    import pyarrow.dataset as ds

    try:
        con.register(name, ds.dataset(str(path), format="parquet"))
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        raise unreadable_parquet(path, exc) from None


def _number(column: str) -> str:
    return f"CASE WHEN isnan(CAST({column} AS DOUBLE)) THEN NULL ELSE CAST({column} AS DOUBLE) END"


def _raw(shifts: list[int], counts_are_integers: bool) -> str:
    """Every source's rows on the run's clock, in the types the figures read (RSS and thread counts as
    BIGINT where every source stores integers, as the sampler writes them)."""
    count = "CAST({0} AS BIGINT) AS {0}" if counts_are_integers else "{0}"
    return " UNION ALL ".join(
        f"SELECT CAST(t_ns AS BIGINT) + {int(shift)} AS t_ns, CAST(worker AS BIGINT) AS worker, "
        f"CAST(host AS VARCHAR) AS host, CAST(pid AS BIGINT) AS pid, CAST(role AS VARCHAR) AS role, "
        f"{_number('cpu_percent')} AS cpu_percent, {count.format('rss_bytes')}, {count.format('num_threads')} "
        f"FROM part{i}" for i, shift in enumerate(shifts))


_RAW_SCHEMA = ("t_ns BIGINT, worker BIGINT, host VARCHAR, pid BIGINT, role VARCHAR, cpu_percent DOUBLE, "
               "rss_bytes BIGINT, num_threads BIGINT")


def source(con: Any, files: tuple[tuple[Path, int], ...] | None,
            frame: pd.DataFrame) -> tuple[str, list[tuple[Any, int]] | None]:
    """The SQL of every sample's row on the run's clock: ``files`` (each registered as a view), else
    ``frame``; a frame without samples is an empty table of the same columns. And each source's record
    batches in its order with its shift, where the samples' gaps can be taken as they stream in (counts
    stored as integers, as the sampler writes them); None where they cannot."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if files:
        for i, (path, _) in enumerate(files):
            _register_file(con, f"part{i}", path)
        whole = all(pa.types.is_integer(schema.field(c).type) for path, _ in files
                    for schema in [pq.read_schema(path)] for c in ("rss_bytes", "num_threads"))
        batches = [(pq.ParquetFile(path).iter_batches(batch_size=_BATCH_ROWS, columns=list(CPU_COLUMNS)), shift)
                   for path, shift in files] if whole else None
        return f"({_raw([shift for _, shift in files], whole)})", batches
    if frame.empty or not set(CPU_COLUMNS) <= set(frame.columns):
        con.execute(f"CREATE TABLE raw ({_RAW_SCHEMA})")
        return "raw", None
    con.register("part0", frame)
    whole = all(frame[c].dtype.kind in "iu" for c in ("rss_bytes", "num_threads"))
    batch = pa.RecordBatch.from_pandas(frame[list(CPU_COLUMNS)], preserve_index=False)
    return f"({_raw([0], whole)})", [([batch], 0)] if whole else None


_BATCH_ROWS = 1 << 20


def tables(con: Any, raw: str, several: bool, batches: list[tuple[Any, int]] | None) -> None:
    """``procs`` then ``samples`` from the rows of ``raw``; ``batches`` (each source's record batches in its
    order, and its shift): the gaps are taken while they stream in, else by sorting every sample."""
    if several:
        con.execute(f"""CREATE TABLE procs AS
            SELECT row_number() OVER (ORDER BY host, pid) - 1 AS proc, * FROM (
                SELECT host, pid, arg_min(worker, t_ns) AS worker, arg_min(role, t_ns) AS role,
                       min(t_ns) AS t_first
                FROM {raw} GROUP BY host, pid)""")
        keyed = f"""(SELECT p.proc, r.* FROM {raw} r JOIN procs p
                     ON r.pid = p.pid AND r.host IS NOT DISTINCT FROM p.host)"""
    else:
        con.execute(f"""CREATE TABLE procs AS
            SELECT pid AS proc, pid, arg_min(worker, t_ns) AS worker, arg_min(host, t_ns) AS host,
                   arg_min(role, t_ns) AS role, min(t_ns) AS t_first FROM {raw} GROUP BY pid""")
        keyed = f"(SELECT pid AS proc, * FROM {raw})"
    if batches is not None and _streamed(con, batches, several):
        return
    con.execute("DROP TABLE IF EXISTS samples")
    con.execute(f"""CREATE TABLE samples AS
        SELECT proc, worker, t_ns, cpu_percent, rss_bytes, num_threads,
               (t_ns - lag(t_ns) OVER (PARTITION BY proc ORDER BY t_ns)) / 1e9 AS gap
        FROM {keyed}""")


_SAMPLES_SCHEMA = ("proc BIGINT, worker BIGINT, t_ns BIGINT, cpu_percent DOUBLE, rss_bytes BIGINT, "
                   "num_threads BIGINT, gap DOUBLE")


def _streamed(con: Any, batches: list[tuple[Any, int]], several: bool) -> bool:
    """Fill ``samples`` batch by batch: each sample's gap is the time since its process's previous sample,
    carried from batch to batch, as the sampler wrote them (tick by tick). False, the table left to be made
    by sorting, when a process's samples are not in time order in its file. Why not a SQL window: it sorts
    every sample, the largest part of the CPU figures' time on a long run, to find an order the file has."""
    import numpy as np
    import pyarrow as pa

    lookup = _proc_lookup(con) if several else None
    con.execute(f"CREATE TABLE samples ({_SAMPLES_SCHEMA})")
    last: dict[int, int] = {}
    for source, shift in batches:
        for batch in source:
            t = batch.column("t_ns").to_numpy(zero_copy_only=False).astype(np.int64) + np.int64(shift)
            pid = batch.column("pid").to_numpy(zero_copy_only=False).astype(np.int64)
            proc = _procs_of(batch, pid, lookup) if lookup is not None else pid
            gap = _gaps(proc, t, last)
            if gap is None:
                return False
            con.register("batch", pa.table({"proc": proc, "worker": batch.column("worker"), "t_ns": t,
                                            "cpu_percent": batch.column("cpu_percent"),
                                            "rss_bytes": batch.column("rss_bytes"),
                                            "num_threads": batch.column("num_threads"), "gap": gap}))
            con.execute(f"INSERT INTO samples SELECT proc, worker, t_ns, {_number('cpu_percent')}, rss_bytes, "
                        f"num_threads, CASE WHEN isnan(gap) THEN NULL ELSE gap END FROM batch")
            con.unregister("batch")
    return True


def _gaps(proc: Any, t: Any, last: dict[int, int]) -> Any:
    """Seconds since each sample's process's previous sample (NaN: its first), ``last`` holding each
    process's latest time from earlier batches (updated); None when a process goes back in time. A group-by
    diff in one pass, no sort; times counted from the batch's first, which keeps them exact in float64."""
    import numpy as np

    codes, procs = pd.factorize(proc)
    since = pd.Series(t - t.min() if len(t) else t, dtype="int64")
    gap = since.groupby(codes).diff().to_numpy(dtype=np.float64) / 1e9
    firsts = np.flatnonzero(~pd.Series(codes).duplicated().to_numpy())
    before = [last.get(int(procs[codes[i]])) for i in firsts]
    carried = np.array([i for i, b in zip(firsts, before, strict=True) if b is not None], dtype=np.int64)
    gap[carried] = (t[carried] - np.array([b for b in before if b is not None], dtype=np.int64)) / 1e9
    if (gap < 0).any():
        return None
    ends = since.groupby(codes).last()
    last.update({int(procs[c]): int(v) + int(t.min()) for c, v in ends.items()})
    return gap


def _proc_lookup(con: Any) -> dict[tuple[str | None, int], int]:
    return {(h, int(p)): int(k) for k, h, p in con.execute("SELECT proc, host, pid FROM procs").fetchall()}


def _procs_of(batch: Any, pid: Any, lookup: dict[tuple[str | None, int], int]) -> Any:
    """Each row's process key, (host, pid), through ``lookup``: a few distinct pairs a batch, mapped once."""
    import numpy as np
    import pyarrow.compute as pc

    hosts = pc.dictionary_encode(batch.column("host").cast("string"), null_encoding="encode")
    names = hosts.dictionary.to_pylist()
    codes = hosts.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    pairs, inverse = np.unique((codes << 32) | pid, return_inverse=True)
    keys = np.array([lookup[(names[int(c) >> 32], int(c) & 0xFFFFFFFF)] for c in pairs], dtype=np.int64)
    return keys[inverse]


def reason(exc: BaseException) -> str:
    """The first line of a reading error, without DuckDB's preamble (it names the view, not the file)."""
    text = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    return text.split("failed: ", 1)[-1][:160]


def unreadable(exc: BaseException) -> bool:
    """An error of reading the files (DuckDB's, or Arrow's through its scan), not of perfkit's queries."""
    import duckdb
    import pyarrow as pa

    return isinstance(exc, (duckdb.IOException, duckdb.InvalidInputException, pa.ArrowException, OSError))
