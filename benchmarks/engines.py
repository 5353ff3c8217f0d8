"""Benchmark: the CPU figures of one run computed by perfkit's analysis, and by Polars and DuckDB written
directly: wall time, CPU time and peak RSS of each, and whether their figures agree with perfkit's (issue 53's
choice of a columnar engine was measured here, perfkit's side then being its pandas code; it is DuckDB since).

The figures are the heaviest of ``perfkit analyze`` on a long run (analysis/cpu.py): over the training window
(first step to last epoch end), per process its samples, CPU% mean and p95, CPU-seconds (each sample's CPU%
times the interval since the same process's previous sample, the first one the sampler's interval), peak RSS
and most threads; per host, its workers' CPU% summed per sample, mean and p95. Each engine runs in a fresh
process (``python -m benchmarks.engines --engine E --run DIR``: its imports, reading the Parquet files and the
figures, timed whole), engines interleaved in every round; its figures are checked against perfkit's (relative
1e-9). The run is generated once by ``benchmarks.synthetic`` at an analysis-speed case's size (``--case``),
or given (``--run-dir``). An engine that is not installed is reported as such.

    python -m benchmarks engines --case 64w --repeats 2
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

from benchmarks._common import (
    Report,
    choice_list,
    conclude,
    env_with_repo,
    finish_args,
    fmt_range,
    heading,
    interleave,
    make_parser,
    markdown_table,
    progress,
    rss_floor_bytes,
    run_measured,
    stats,
)

NAME = "engines"
ENGINES = ("perfkit", "polars", "duckdb")
MARK = "ENGINE_FIGURES "
P95 = 0.95


def figures(engine: str, run: Path) -> dict[str, Any]:
    """The figures of ``run`` by ``engine`` (in this process)."""
    return {"perfkit": _perfkit, "polars": _polars, "duckdb": _duckdb}[engine](run)


def _perfkit(run: Path) -> dict[str, Any]:
    """As ``perfkit analyze`` loads and computes them: the samples left on disk, queried there."""
    from perfkit.analysis.cpu import host_table, process_table
    from perfkit.analysis.cpusamples import CpuSamples
    from perfkit.analysis.load import load_runs

    [loaded] = load_runs([run], run.parent).runs
    samples = CpuSamples.of(loaded.record, files=loaded.cpu_files)
    procs = process_table(samples, loaded.meta).sort_values("pid")
    hosts = host_table(samples, loaded.meta).sort_values("host")
    return _canonical(procs.to_dict("records"), hosts.to_dict("records"))


def _interval(run: Path) -> float:
    from perfkit.results import load_meta

    meta = load_meta(run)
    return float(meta.sampler.get("interval_s") or meta.config.get("sample_interval"))


def _polars(run: Path) -> dict[str, Any]:
    import polars as pl

    steps = pl.scan_parquet(str(run / "workers" / "*" / "steps.parquet"))
    epochs = pl.scan_parquet(str(run / "workers" / "*" / "epochs.parquet"))
    start = steps.select(pl.col("t_start_ns").min()).collect().item()
    end = epochs.select(pl.col("t_end_ns").max()).collect().item()
    dt = (pl.col("t_ns").diff().over("pid") / 1e9).fill_null(_interval(run))
    cpu = (pl.scan_parquet(str(run / "cpu.parquet")).with_columns(cpu_s=pl.col("cpu_percent") / 100.0 * dt)
           .filter(pl.col("t_ns").is_between(start, end)))
    procs = cpu.group_by("pid").agg(
        worker=pl.col("worker").first(), host=pl.col("host").first(), samples=pl.len(),
        cpu_mean=pl.col("cpu_percent").mean(), cpu_p95=pl.col("cpu_percent").quantile(P95, "linear"),
        cpu_s=pl.col("cpu_s").sum(), rss_peak_bytes=pl.col("rss_bytes").max(),
        threads_max=pl.col("num_threads").max()).sort("pid").collect()
    ticks = cpu.filter(pl.col("worker") >= 0).group_by("host", "t_ns").agg(pl.col("cpu_percent").sum())
    hosts = ticks.group_by("host").agg(cpu_mean=pl.col("cpu_percent").mean(),
                                       cpu_p95=pl.col("cpu_percent").quantile(P95, "linear")).sort("host").collect()
    return _canonical(procs.to_dicts(), hosts.to_dicts())


def _duckdb(run: Path) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect()
    steps, epochs = (str(run / "workers" / "*" / f"{t}.parquet") for t in ("steps", "epochs"))
    start = con.execute("SELECT min(t_start_ns) FROM read_parquet(?)", [steps]).fetchone()[0]
    end = con.execute("SELECT max(t_end_ns) FROM read_parquet(?)", [epochs]).fetchone()[0]
    # one CTE per query, parameters bound (a view cannot take them)
    cpu = """WITH cpu AS (SELECT *, cpu_percent / 100.0 * coalesce(
                 (t_ns - lag(t_ns) OVER (PARTITION BY pid ORDER BY t_ns)) / 1e9, $interval) AS cpu_s
             FROM read_parquet($path))"""
    params = {"interval": _interval(run), "path": str(run / "cpu.parquet"), "start": start, "end": end}
    window = "t_ns BETWEEN $start AND $end"
    procs = con.execute(f"""{cpu} SELECT pid, first(worker) AS worker, first(host) AS host, count(*) AS samples,
                                   avg(cpu_percent) AS cpu_mean, quantile_cont(cpu_percent, {P95}) AS cpu_p95,
                                   sum(cpu_s) AS cpu_s, max(rss_bytes) AS rss_peak_bytes,
                                   max(num_threads) AS threads_max
                            FROM cpu WHERE {window} GROUP BY pid ORDER BY pid""", params)
    proc_rows = [dict(zip([d[0] for d in procs.description], r, strict=True)) for r in procs.fetchall()]
    hosts = con.execute(f"""{cpu} SELECT host, avg(s) AS cpu_mean, quantile_cont(s, {P95}) AS cpu_p95
                            FROM (SELECT host, t_ns, sum(cpu_percent) AS s FROM cpu WHERE {window} AND worker >= 0
                                  GROUP BY host, t_ns) GROUP BY host ORDER BY host""", params)
    host_rows = [dict(zip([d[0] for d in hosts.description], r, strict=True)) for r in hosts.fetchall()]
    return _canonical(proc_rows, host_rows)


PROC_KEYS = ("pid", "worker", "host", "samples", "cpu_mean", "cpu_p95", "cpu_s", "rss_peak_bytes", "threads_max")
HOST_KEYS = ("host", "cpu_mean", "cpu_p95")


def _canonical(procs: list[dict[str, Any]], hosts: list[dict[str, Any]]) -> dict[str, Any]:
    value = lambda v: str(v) if isinstance(v, str) else float(v)  # noqa: E731
    return {"processes": [[value(r[k]) for k in PROC_KEYS] for r in procs],
            "hosts": [[value(r[k]) for k in HOST_KEYS] for r in hosts]}


def disagreement(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Where ``b``'s figures differ from ``a``'s by more than 1e-9 relative (None: they agree)."""
    for table in ("processes", "hosts"):
        if len(a[table]) != len(b[table]):
            return f"{table}: {len(b[table])} rows, not {len(a[table])}"
        for ra, rb in zip(a[table], b[table], strict=True):
            for x, y, key in zip(ra, rb, PROC_KEYS if table == "processes" else HOST_KEYS, strict=True):
                same = x == y if isinstance(x, str) else math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
                if not same:
                    return f"{table} {ra[0]} {key}: {y!r}, not {x!r}"
    return None


def _one(engine: str, run: Path, timeout: float) -> dict[str, Any]:
    proc = run_measured([sys.executable, "-m", "benchmarks.engines", "--engine", engine, "--run", str(run)], timeout,
                        env=env_with_repo())
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARK)), None)
    return {"ok": proc.ok and line is not None, "error": proc.error() if not proc.ok else None,
            "wall_s": proc.wall_s, "cpu_s": proc.cpu_s, "peak_rss_bytes": proc.peak_rss_bytes,
            "figures": json.loads(line[len(MARK):]) if line else None}


def _installed(engine: str) -> bool:
    import importlib.util

    return engine == "perfkit" or importlib.util.find_spec(engine) is not None


def measure(args: argparse.Namespace) -> Report:
    from benchmarks.analysis_speed import CASES, SMOKE, generate_apart

    engines = choice_list("--engines", args.engines, ENGINES)
    report = Report(NAME, {"case": args.case, "run_dir": str(args.run_dir) if args.run_dir else None,
                           "repeats": args.repeats, "engines": engines})
    root = args.results_root / "bench" / "runs" / f"{NAME}-{args.stamp}"
    if args.run_dir is None:
        case = CASES[args.case]
        steps, rows = SMOKE[args.case] if args.smoke else (case["steps"], case["cpu_rows"])
        progress(f"generating the {args.case} run: {steps:,} steps per worker, {rows:,} CPU samples")
        report.results["generated"] = generate_apart(root, args.case, steps, rows, args.timeout)
        run = root / report.results["generated"]["run"]
    else:
        run = args.run_dir
    missing = [e for e in engines if not _installed(e)]
    report.results["not_installed"] = missing
    arms = {e: (lambda i, e=e: _one(e, run, args.timeout)) for e in engines if e not in missing}
    got = interleave(arms, args.repeats, progress)
    reference = next((r["figures"] for r in got.get("perfkit", []) if r["ok"]), None)
    for engine, runs in got.items():
        ok = [r for r in runs if r["ok"]]
        report.errors += [f"{engine} #{i + 1}: {r['error'] or 'printed no figures'}" for i, r in enumerate(runs)
                          if not r["ok"]]
        report.results[engine] = {
            "wall_s": stats(r["wall_s"] for r in ok), "cpu_s": stats(r["cpu_s"] for r in ok),
            "peak_rss_bytes": stats(r["peak_rss_bytes"] for r in ok),
            "agrees_with_perfkit": None if reference is None or not ok else disagreement(reference, ok[0]["figures"])
            or True}
    report.results["rss_floor_bytes"] = rss_floor_bytes()
    if args.run_dir is None and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return report


def table(report: Report) -> str:
    rows = []
    for engine in ENGINES:
        r = report.results.get(engine)
        if r is None:
            continue
        rss = {k: (v / 1e9 if isinstance(v, (int, float)) and k in ("median", "min", "max") else v)
               for k, v in r["peak_rss_bytes"].items()}
        agrees = r["agrees_with_perfkit"]
        rows.append([engine, fmt_range(r["wall_s"]), fmt_range(r["cpu_s"]), fmt_range(rss),
                     "yes" if agrees is True else "-" if agrees is None else f"no: {agrees}"])
    missing = report.results.get("not_installed") or []
    tail = f"\n\nNot installed: {', '.join(missing)}." if missing else ""
    floor = report.results.get("rss_floor_bytes")
    tail += f"\n\nPeak RSS floor (a bare `python -c pass` started here): {floor / 1e9:.3f} GB." if floor else ""
    return (f"{heading(report)}\n\n"
            + markdown_table(["engine", "wall s", "CPU s", "peak RSS GB", "figures as perfkit's"], rows,
                             right=(1, 2, 3)) + tail)


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_preset=None, default_repeats=2)
    p.add_argument("--engine", choices=ENGINES, default=None, help=argparse.SUPPRESS)  # one engine, in-process
    p.add_argument("--run", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--case", default="16w", choices=["4w", "16w", "64w", "256w"], help="the generated run's size")
    p.add_argument("--run-dir", type=Path, default=None, help="an existing run instead of a generated one")
    p.add_argument("--engines", default=",".join(ENGINES), help="comma-separated: perfkit, polars, duckdb")
    p.add_argument("--keep", action="store_true", help="keep the generated run directory")
    args = p.parse_args(argv)
    if args.engine is not None:  # the measured process
        print(MARK + json.dumps(figures(args.engine, args.run)), flush=True)
        return 0
    args = finish_args(args)
    args.timeout = min(args.timeout, 900.0)
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
