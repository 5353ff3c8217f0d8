"""Benchmark 6: the article's experiment, run by perfkit here, beside the article's own figures.

``perfkit run --preset P --mode single``, ``perfkit run --preset P --mode multi --cluster
examples/blog-cluster.toml`` (its 16-core + 4-core hosts emulated on this machine), interleaved when
repeated, then ``perfkit analyze`` on the last pair (JSON, and an HTML report beside the runs). The table
puts the article's figures (constants quoted below, nothing else is) beside what perfkit measured here,
with perfkit's verdict, the date and the machine.

    python -m benchmarks article --preset blog       # ~1.5-2 h on 2 cores
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks._common import (
    CHECKOUT,
    PERFKIT,
    Report,
    conclude,
    env_with_repo,
    finish_args,
    fmt,
    heading,
    interleave,
    make_parser,
    markdown_table,
    progress,
    ratios,
    run_measured,
    smoke_size,
    stats,
)
from benchmarks._runs import Training, perfkit_run, runs_dir, training_summary

NAME = "article"
SOURCE = ("the article (shared/seeds/000): \"实操TF单机模式MirroredStrateg，分布式模式MultiWorkerMirroredStrategy "
          "比较\"; tensor101 16 cores/64 GB + tensor102 4 cores/16 GB, 5 epochs, global batch 1024")
# Quoted from the article; nothing else in this file is a hard-coded figure.
ARTICLE = {
    "single": {"steady_epoch_s": 100.0, "fit_s": 528.0, "cpu_per_process": "~800%", "val_accuracy": 0.98},
    "multi": {"steady_epoch_s": 80.0, "fit_s": 414.0, "cpu_per_process": "~300%", "val_accuracy": None},
}
DEFAULT_CLUSTER = CHECKOUT / "examples" / "blog-cluster.toml"


def run_pair(args: argparse.Namespace, runs: Path) -> dict[str, list[Training]]:
    base = ["--preset", args.preset, *smoke_size(args)]
    arms = {
        "single": lambda i: perfkit_run(f"single #{i + 1}", ["--mode", "single", *base], runs, args.timeout),
        "multi": lambda i: perfkit_run(f"multi #{i + 1}", ["--mode", "multi", "--cluster", str(args.cluster), *base],
                                       runs, args.timeout),
    }
    return interleave(arms, args.repeats, progress)


def analyze(single: Training, multi: Training, runs: Path, timeout: float) -> dict[str, Any]:
    """``perfkit analyze`` on the pair, the single run as baseline; its JSON, or why there is none."""
    if not (single.run_dir and multi.run_dir and not single.error and not multi.error):
        return {"error": "not run: a training failed"}
    out = runs / "analysis.json"
    proc = run_measured([*PERFKIT, "analyze", single.run_dir, multi.run_dir, "--results-dir", str(runs),
                         "--baseline", Path(single.run_dir).name, "--format", "json", "--output", str(out),
                         "--html", str(runs / "report.html")], timeout, env=env_with_repo())
    if not proc.ok or not out.is_file():
        return {"error": proc.error() or "perfkit analyze wrote no JSON"}
    data = json.loads(out.read_text(encoding="utf-8"))
    return {"wall_s": proc.wall_s, "json": str(out), "html": str(runs / "report.html"),
            "verdict": data.get("verdict", []), "runs": data.get("runs", []), "hosts": data.get("hosts", []),
            "workers": data.get("workers", [])}


def worker_cpu(analysis: dict[str, Any], run_dir: str | None) -> list[dict[str, Any]]:
    """CPU% mean per worker of the multi run, from perfkit analyze's workers table."""
    rid = Path(run_dir).name if run_dir else None
    return [{"worker": w.get("worker"), "host": w.get("host"), "cpu_mean": w.get("cpu_mean")}
            for w in analysis.get("workers", []) if w.get("run_id") == rid]


def measure(args: argparse.Namespace) -> Report:
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats, "cluster": str(args.cluster)})
    report.targets = {"article": ARTICLE, "source": SOURCE}
    runs = runs_dir(args.results_root, NAME, args.stamp)
    got = run_pair(args, runs)
    report.results = {arm: training_summary(tr) for arm, tr in got.items()}
    progress("perfkit analyze")
    analysis = analyze(got["single"][-1], got["multi"][-1], runs, min(args.timeout, 1800.0))
    report.results["analysis"] = analysis
    report.results["multi_worker_cpu"] = worker_cpu(analysis, got["multi"][-1].run_dir)
    single, multi = got["single"], got["multi"]
    report.results["speedup"] = {  # single / multi, paired by round, as the article's 100 s / 80 s
        "steady_epoch": ratios([t.steady_epoch_s for t in single], [t.steady_epoch_s for t in multi]),
        "fit": ratios([t.fit_s for t in single], [t.fit_s for t in multi])}
    for tr in got.values():
        report.errors += [f"{t.label}: {t.error}" for t in tr if t.error]
    if "error" in analysis:
        report.errors.append(f"perfkit analyze: {analysis['error']}")
    return report


def _median(results: dict[str, Any], arm: str, key: str) -> float | None:
    return stats(r.get(key) for r in results[arm]["runs"])["median"]


def _cpu_multi(results: dict[str, Any]) -> str:
    cpus = [(w["host"], w["cpu_mean"]) for w in results["multi_worker_cpu"] if w.get("cpu_mean") is not None]
    if not cpus:
        return _unit(_median(results, "multi", "cpu_mean"), ".0f", "% (worker 0)")
    return ", ".join(f"{c:.0f}% ({h})" for h, c in cpus)


def _unit(x: float | None, spec: str, unit: str) -> str:
    return "failed" if x is None else fmt(x, spec) + unit


def _pct(x: float | None) -> str:
    return "failed" if x is None else f"{x * 100:.1f}%"


def _rows(r: dict[str, Any]) -> list[list[str]]:
    s, m = ARTICLE["single"], ARTICLE["multi"]
    def got(arm: str, key: str) -> str:
        return fmt(_median(r, arm, key), ".1f")

    return [
        ["single: steady epoch s", f"{s['steady_epoch_s']:.0f}", got("single", "steady_epoch_s")],
        ["single: training s (first step to last epoch end)", f"{s['fit_s']:.0f}", got("single", "fit_s")],
        ["single: CPU per process", s["cpu_per_process"], _unit(_median(r, "single", "cpu_mean"), ".0f", "%")],
        ["single: val accuracy", _pct(s["val_accuracy"]), _pct(_median(r, "single", "val_accuracy"))],
        ["multi: steady epoch s", f"{m['steady_epoch_s']:.0f}", got("multi", "steady_epoch_s")],
        ["multi: training s", f"{m['fit_s']:.0f}", got("multi", "fit_s")],
        ["multi: CPU per process", m["cpu_per_process"], _cpu_multi(r)],
        ["multi: val accuracy", "not given", _pct(_median(r, "multi", "val_accuracy"))],
        ["speedup, steady epoch (single / multi)", f"{s['steady_epoch_s'] / m['steady_epoch_s']:.2f}x",
         _unit(r["speedup"]["steady_epoch"]["median"], ".2f", "x")],
        ["speedup, training time", f"{s['fit_s'] / m['fit_s']:.2f}x", _unit(r["speedup"]["fit"]["median"], ".2f", "x")],
    ]


def table(report: Report) -> str:
    r = report.results
    verdict = r["analysis"].get("verdict") or [f"(no verdict: {r['analysis'].get('error', 'none given')})"]
    head = ["figure", "article (16 + 4 cores)", f"perfkit here ({report.machine.get('logical_cores')} cores)"]
    return (f"{heading(report)}\n\n{markdown_table(head, _rows(r), (1, 2))}\n\n"
            f"Article: {SOURCE}. perfkit: `perfkit run --preset {report.params['preset']}` single, and multi "
            f"with `--cluster {report.params['cluster']}` emulated on this machine.\n\nperfkit's verdict:\n"
            + "\n".join(f"- {line}" for line in verdict))


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_preset="blog", default_repeats=1)
    p.add_argument("--cluster", type=Path, default=DEFAULT_CLUSTER if DEFAULT_CLUSTER.is_file()
                   else Path("examples/blog-cluster.toml"), help="cluster file (default: the article's)")
    args = finish_args(p.parse_args(argv))
    if not args.cluster.is_file():
        raise SystemExit(f"--cluster: {args.cluster} not found")
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())

