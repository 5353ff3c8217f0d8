"""Benchmark 4: generating the dataset (blog size by default): time and peak RSS (targets <= 15 s, <= 2.5 GB).

``perfkit data generate --preset P --out <temp>.parquet``, repeated; each run writes a fresh file beside
the others (never the shared cache) and is removed after. Wall time is the whole command, Python start
and imports included; "generated and written in" is perfkit's own figure for the work itself; peak RSS
is the command's maximum resident set (``wait4``).

    python -m benchmarks datagen --preset blog --repeats 3
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

from benchmarks._common import (
    PERFKIT,
    Report,
    conclude,
    env_with_repo,
    finish_args,
    fmt,
    fmt_range,
    heading,
    make_parser,
    markdown_table,
    progress,
    run_measured,
    stats,
)

NAME = "datagen"
TARGET_S, TARGET_RSS_BYTES = 15.0, 2.5e9  # for the blog preset
_INNER = re.compile(r"generated and written in ([0-9.]+) s")


def measure(args: argparse.Namespace) -> Report:
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats})
    report.targets = {"preset": "blog", "wall_s_max": TARGET_S, "peak_rss_bytes_max": TARGET_RSS_BYTES}
    runs = []
    with tempfile.TemporaryDirectory(prefix="perfkit-bench-datagen-") as tmp:
        for i in range(args.repeats):
            progress(f"[{i + 1}/{args.repeats}] perfkit data generate --preset {args.preset}")
            out = Path(tmp) / f"run{i}.parquet"
            proc = run_measured([*PERFKIT, "data", "generate", "--preset", args.preset, "--out", str(out)],
                                args.timeout, env=env_with_repo())
            inner = _INNER.search(proc.stdout)
            runs.append({"wall_s": proc.wall_s, "peak_rss_bytes": proc.peak_rss_bytes,
                         "inner_s": float(inner.group(1)) if inner else None,
                         "file_bytes": out.stat().st_size if out.exists() else None, "error": proc.error()})
            out.unlink(missing_ok=True)
    ok = [r for r in runs if not r["error"]]
    report.results = {
        "runs": runs,
        "wall_s": stats(r["wall_s"] for r in ok),
        "inner_s": stats(r["inner_s"] for r in ok),
        "peak_rss_bytes": stats(r["peak_rss_bytes"] for r in ok),
    }
    report.errors = [f"run {i + 1}: {r['error']}" for i, r in enumerate(runs) if r["error"]]
    wall, rss = report.results["wall_s"]["median"], report.results["peak_rss_bytes"]["median"]
    report.results["meets_target"] = (None if args.preset != "blog" or wall is None or rss is None
                                      else wall <= TARGET_S and rss <= TARGET_RSS_BYTES)
    return report


def table(report: Report) -> str:
    r = report.results
    gb = {k: (v / 1e9 if isinstance(v, (int, float)) and k in ("median", "min", "max") else v)
          for k, v in r["peak_rss_bytes"].items()}
    row = [report.params["preset"], fmt_range(r["wall_s"], ".1f"), fmt_range(r["inner_s"], ".1f"), fmt_range(gb)]
    met = r["meets_target"]
    verdict = ("targets apply to the blog preset" if met is None and report.params["preset"] != "blog"
               else "not measured" if met is None else "meets" if met else "misses")
    return (f"{heading(report)}\n\n"
            f"{markdown_table(['preset', 'whole command s', 'generate + write s', 'peak RSS GB'], [row], (1, 2, 3))}"
            f"\n\nTargets <= {TARGET_S:.0f} s and <= {TARGET_RSS_BYTES / 1e9:.1f} GB (blog): {verdict}; "
            f"file {fmt((r['runs'][0].get('file_bytes') or float('nan')) / 1e6, '.0f', '?')} MB.")


def main(argv: list[str] | None = None) -> int:
    args = finish_args(make_parser(NAME, __doc__, default_preset="blog").parse_args(argv))
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
