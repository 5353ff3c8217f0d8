"""Benchmark: how far the equal-workers what-if is from running it.

For each unequal emulated cluster (default: 2 workers at 1.5/0.5 and 1.2/0.8 cores of a 2-core machine,
4 workers as the blog cluster 1.6/0.4, 4 workers on two hosts 1.2/0.8), ``perfkit run --mode multi`` with
the default trace window, ``perfkit analyze``'s prediction (steady epoch with every worker at the median
worker's speed, and the budgets that would realise it), then the realised configuration run the same way,
and predicted against measured. Target: |error| <= 10% on every row, median <= 5%.

    python -m bench whatif --repeats 1
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from bench._common import Report, conclude, finish_args, fmt, heading, make_parser, markdown_table, progress
from bench._runs import perfkit_run, runs_dir

NAME = "whatif"
TARGET_ROW, TARGET_MEDIAN = 0.10, 0.05
# name -> hosts (name, cores as a share of this machine, workers)
CLUSTERS: dict[str, list[tuple[str, float, int]]] = {
    "2w 1.5/0.5": [("fast", 0.75, 1), ("slow", 0.25, 1)],
    "2w 1.2/0.8": [("fast", 0.6, 1), ("slow", 0.4, 1)],
    "4w blog 1.6/0.4": [("tensor101", 0.8, 3), ("tensor102", 0.2, 1)],
    "4w 1.2/0.8": [("big", 0.6, 2), ("small", 0.4, 2)],
}


def cluster_toml(hosts: list[tuple[str, float, int]], cores: float) -> str:
    return "".join(f'[[hosts]]\nname = "{n}"\naddress = "127.0.0.{i + 1}"\ncores = {share * cores:.4f}\n'
                   f"workers = {w}\nbase_port = 20000\n" for i, (n, share, w) in enumerate(hosts))


def one(name: str, hosts: list[tuple[str, float, int]], args: argparse.Namespace, i: int) -> dict[str, Any]:
    from perfkit.analysis.analyze import analyze
    from perfkit.analysis.verify import equal_cluster_toml
    from perfkit.analysis.whatif import parse_budgets
    from perfkit.errors import UsageError
    from perfkit.results import load_meta
    from perfkit.trainer.cpubudget import available_cores

    cores = float(len(available_cores()))
    runs = runs_dir(args.results_root, NAME, args.stamp)
    slug = name.replace(" ", "-").replace("/", "_")
    path = runs / f"{slug}-{i}.toml"
    path.write_text(cluster_toml(hosts, cores))
    base = ["--mode", "multi", "--preset", args.preset, "--epochs", str(args.epochs)]
    unequal = perfkit_run(f"{name} #{i + 1}", [*base, "--cluster", str(path)], runs, args.timeout)
    out: dict[str, Any] = {"cluster": name, "unequal": unequal.to_dict()}
    if unequal.error:
        out["error"] = f"unequal run: {unequal.error}"
        return out
    row = analyze([Path(unequal.run_dir)], runs).runs.iloc[0]
    out["prediction"] = {k: row[k] for k in ("equal_epoch_s", "equal_epoch_lo_s", "equal_epoch_hi_s", "equal_step_s",
                                             "equal_transfer_s", "equal_transfer_source", "equal_val_s",
                                             "equal_budgets", "split_source", "steady_epoch_s")}
    if not isinstance(row["equal_budgets"], str):
        out["error"] = f"no what-if ({row['split_note']})"
        return out
    budgets = parse_budgets(row["equal_budgets"])
    equal_path = runs / f"{slug}-{i}-equal.toml"
    try:
        equal_path.write_text(equal_cluster_toml(load_meta(Path(unequal.run_dir)), budgets, cores))
    except UsageError as exc:  # e.g. equal workers would need more cores than this machine has
        out["error"] = str(exc)
        return out
    equal = perfkit_run(f"{name} equal #{i + 1}", [*base, "--cluster", str(equal_path)], runs, args.timeout)
    out["equal"] = equal.to_dict()
    if equal.error or equal.steady_epoch_s is None:
        out["error"] = f"equal run: {equal.error}"
        return out
    out["measured_epoch_s"] = equal.steady_epoch_s
    out["error_ratio"] = (float(row["equal_epoch_s"]) - equal.steady_epoch_s) / equal.steady_epoch_s
    out["measured_val_s"] = statistics.median(e["val_s"] for e in equal.epochs[1:]) if len(equal.epochs) > 1 else None
    return out


def measure(args: argparse.Namespace) -> Report:
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats, "epochs": args.epochs,
                           "clusters": list(args.clusters)})
    report.targets = {"abs_error_max_per_row": TARGET_ROW, "abs_error_median": TARGET_MEDIAN}
    rows = []
    for i in range(args.repeats):
        for name in args.clusters:
            progress(f"[{i + 1}/{args.repeats}] {name}")
            rows.append(one(name, CLUSTERS[name], args, i))
    report.results = {"rows": rows}
    errors = [abs(r["error_ratio"]) for r in rows if "error_ratio" in r]
    report.results["abs_error_max"] = max(errors) if errors else None
    report.results["abs_error_median"] = statistics.median(errors) if errors else None
    report.results["meets_target"] = (bool(errors) and max(errors) <= TARGET_ROW
                                      and statistics.median(errors) <= TARGET_MEDIAN) if errors else None
    report.errors += [f"{r['cluster']}: {r['error']}" for r in rows if "error" in r]
    return report


def table(report: Report) -> str:
    out = []
    for r in report.results["rows"]:
        p = r.get("prediction") or {}
        out.append([r["cluster"], fmt(p.get("steady_epoch_s"), ".1f"), p.get("equal_budgets") or "-",
                    fmt(p.get("equal_epoch_s"), ".1f") + (f" ({fmt(p.get('equal_epoch_lo_s'), '.1f')}–"
                                                          f"{fmt(p.get('equal_epoch_hi_s'), '.1f')})" if p else ""),
                    fmt(r.get("measured_epoch_s"), ".1f"), fmt(r.get("error_ratio"), "+.1%"),
                    p.get("equal_transfer_source") or "-"])
    head = ["cluster", "unequal epoch s", "budgets for equal workers", "predicted s (95%)", "measured s", "error",
            "transfer from"]
    res = report.results
    note = (f"|error| max {fmt(res['abs_error_max'], '.1%')}, median {fmt(res['abs_error_median'], '.1%')} "
            f"(target <= {TARGET_ROW:.0%} per row, <= {TARGET_MEDIAN:.0%} median): "
            f"{'met' if res['meets_target'] else 'missed' if res['meets_target'] is False else 'not measured'}")
    return f"{heading(report)}\n\n{markdown_table(head, out, right=(1, 3, 4, 5))}\n\n{note}."


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_repeats=1)
    p.add_argument("--epochs", type=int, default=3, help="epochs per run (steady figures need >= 2)")
    p.add_argument("--clusters", default=",".join(CLUSTERS), help=f"comma-separated, of: {', '.join(CLUSTERS)}")
    args = p.parse_args(argv)
    args.clusters = [c.strip() for c in args.clusters.split(",") if c.strip()]
    unknown = [c for c in args.clusters if c not in CLUSTERS]
    if unknown or not args.clusters:
        raise SystemExit(f"--clusters: unknown {unknown}; choose from {', '.join(CLUSTERS)}")
    args = finish_args(args)
    if args.smoke:
        args.clusters, args.epochs = ["2w 1.5/0.5"], 2
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
