"""Benchmark: how far the what-ifs are from running them.

For each unequal emulated cluster (default: 2 workers at 1.5/0.5 and 1.2/0.8 cores of a 2-core machine,
4 workers as the blog cluster's 4:1 cores at 90% of the machine, 4 workers on two hosts 1.2/0.8):
``perfkit run --mode multi`` with the default trace window; ``perfkit analyze``'s predictions (the steady
epoch with every worker at the median worker's speed and the budgets that would realise it; where the
placement what-if moves a worker, the steady epoch with the proposed workers per host); then each
configuration run the same way (its trace window moved into the first epoch, which steady figures leave
out: the prediction is of an untraced epoch), and predicted against measured. A row is one cluster's
what-if over the repeats: the median predicted against the median measured (one pair of runs cannot test
a 10% claim where the same configuration run again differs by more than that; each row gives that spread
and every run's own error). Target: |error| <= 10% on every row, median <= 5%.

    python -m benchmarks whatif --repeats 3
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path
from typing import Any

from benchmarks._common import (
    Report,
    choice_list,
    conclude,
    finish_args,
    fmt,
    heading,
    make_parser,
    markdown_table,
    progress,
    smoke_size,
)
from benchmarks._runs import perfkit_run, runs_dir

NAME = "whatif"
TARGET_ROW, TARGET_MEDIAN = 0.10, 0.05
# name -> hosts (name, cores as a share of this machine, workers)
CLUSTERS: dict[str, list[tuple[str, float, int]]] = {
    "2w 1.5/0.5": [("fast", 0.75, 1), ("slow", 0.25, 1)],
    "2w 1.2/0.8": [("fast", 0.6, 1), ("slow", 0.4, 1)],
    # the blog's 16:4 cores at 90% of the machine: at 100% its equal-workers configuration needs every core
    # (and a hair more), leaving nothing for the launcher, and is refused as not realisable here
    "4w blog 1.44/0.36": [("tensor101", 0.72, 3), ("tensor102", 0.18, 1)],
    "4w 1.2/0.8": [("big", 0.6, 2), ("small", 0.4, 2)],
}


def cluster_toml(hosts: list[tuple[str, float, int]], cores: float) -> str:
    return "".join(f'[[hosts]]\nname = "{n}"\naddress = "127.0.0.{i + 1}"\ncores = {share * cores:.4f}\n'
                   f"workers = {w}\nbase_port = 20000\n" for i, (n, share, w) in enumerate(hosts))


def one(name: str, hosts: list[tuple[str, float, int]], args: argparse.Namespace, i: int) -> list[dict[str, Any]]:
    """The unequal run, then each what-if it proposes run as predicted: one row per what-if."""
    from perfkit.analysis.analyze import analyze
    from perfkit.analysis.cpu import requested_budgets
    from perfkit.analysis.verify import (
        equal_cluster_toml,
        placement_cluster_toml,
        prediction,
        proposed_workers,
        verification_window_of,
    )
    from perfkit.analysis.whatif import budgets_text, parse_budgets
    from perfkit.errors import UsageError
    from perfkit.results import load_meta
    from perfkit.trainer.hosts.cpubudget import available_cores

    cores = float(len(available_cores()))
    runs = runs_dir(args.results_root, NAME, args.stamp)
    slug = name.replace(" ", "-").replace("/", "_")
    path = runs / f"{slug}-{i}.toml"
    path.write_text(cluster_toml(hosts, cores))
    base = ["--mode", "multi", "--preset", args.preset, "--epochs", str(args.epochs), *smoke_size(args)]
    unequal = perfkit_run(f"{name} #{i + 1}", [*base, "--cluster", str(path)], runs, args.timeout)
    out: dict[str, Any] = {"cluster": name, "what": "equal workers", "unequal": unequal.to_dict()}
    if unequal.error:
        return [out | {"error": f"unequal run: {unequal.error}"}]
    row = next(analyze([Path(unequal.run_dir)], runs).runs.itertuples(index=False))
    meta = load_meta(Path(unequal.run_dir))
    if not isinstance(row.equal_budgets, str):
        return [out | {"error": f"no what-if ({row.split_note})"}]
    plans = [("equal workers", prediction(row),
              lambda: equal_cluster_toml(meta, parse_budgets(row.equal_budgets), cores))]
    # The placement what-if, where it moves a worker; not in --smoke, whose one cluster's placement run
    # `perfkit compare --verify`'s test already makes (CI time).
    if row.placement_epoch_s == row.placement_epoch_s and not args.smoke:
        applied = requested_budgets(meta)
        plans.append(("placement", prediction(row, "placement", budgets_text(applied)),
                      lambda: placement_cluster_toml(meta, applied, proposed_workers(row), cores)))
    window = ["--profile-steps", verification_window_of(Path(unequal.run_dir))]
    rows = []
    for what, pred, toml in plans:
        r = out | {"what": what, "steady_epoch_s": row.steady_epoch_s, "split_source": row.split_source,
                   "prediction": pred}
        try:
            text = toml()
        except UsageError as exc:  # e.g. equal workers would need more cores than this machine has
            rows.append(r | {"error": str(exc)})
            continue
        check_path = runs / f"{slug}-{i}-{what.replace(' ', '-')}.toml"
        check_path.write_text(text)
        check = perfkit_run(f"{name} {what} #{i + 1}", [*base, *window, "--cluster", str(check_path)], runs,
                            args.timeout)
        rows.append(r | _measured(check, pred, runs))
    return rows


def _measured(check: Any, pred: dict[str, Any], runs: Path) -> dict[str, Any]:
    from perfkit.analysis.analyze import analyze
    from perfkit.analysis.verify import at_realised

    out: dict[str, Any] = {"check": check.to_dict()}
    if check.error or check.steady_epoch_s is None:
        return out | {"error": f"verification run: {check.error}"}
    workers = analyze([Path(check.run_dir)], runs).workers
    computed = float(workers["compute_median_s"].median()) if "compute_median_s" in workers else math.nan
    # Did the configuration give its workers the speed the what-if assumed, and what does the model say at
    # the speed it did give (analysis/verify.py)?
    moved = at_realised(pred, pred["predicted_epoch_s"], check.steady_epoch_s, computed)
    return out | {"measured_epoch_s": check.steady_epoch_s,
                  "error_ratio": (pred["predicted_epoch_s"] - check.steady_epoch_s) / check.steady_epoch_s,
                  "compute_realised_ratio": computed / pred["compute_s"] if pred.get("compute_s") else None,
                  "error_at_realised": moved["error_at_realised"]}


def measure(args: argparse.Namespace) -> Report:
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats, "epochs": args.epochs,
                           "clusters": list(args.clusters)})
    report.targets = {"abs_error_max_per_row": TARGET_ROW, "abs_error_median": TARGET_MEDIAN}
    rows = []
    for i in range(args.repeats):
        for name in args.clusters:
            progress(f"[{i + 1}/{args.repeats}] {name}")
            rows.extend(one(name, CLUSTERS[name], args, i))
    report.results = {"rows": rows, "summary": summarise(rows)}
    # The target is judged on each cluster's what-if over the repeats (the median predicted against the
    # median measured): one pair of runs cannot test a 10% claim on a machine where the same configuration
    # run again differs by more than that (``measured_spread``).
    errors = [abs(r["error_ratio"]) for r in report.results["summary"] if r["error_ratio"] is not None]
    report.results["per_run_abs_errors"] = sorted(abs(r["error_ratio"]) for r in rows if "error_ratio" in r)
    report.results["rows_measured"] = len(errors)
    report.results["abs_error_max"] = max(errors) if errors else None
    report.results["abs_error_median"] = statistics.median(errors) if errors else None
    report.results["meets_target"] = (bool(errors) and max(errors) <= TARGET_ROW
                                      and statistics.median(errors) <= TARGET_MEDIAN) if errors else None
    # A diagnostic, not the target: the model's error at the speed the emulation really gave the workers.
    moved = [abs(r["error_at_realised"]) for r in rows if math.isfinite(r.get("error_at_realised", math.nan))]
    report.results["abs_error_max_at_realised"] = max(moved) if moved else None
    report.results["abs_error_median_at_realised"] = statistics.median(moved) if moved else None
    report.errors += [f"{r['cluster']} ({r['what']}): {r['error']}" for r in rows if "error" in r]
    return report


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (cluster, what-if): medians over the repeats measured, the error between them, and how
    far apart the same configuration's measurements were."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["cluster"], r["what"]), []).append(r)
    out = []
    for (cluster, what), rs in groups.items():
        done = [r for r in rs if "error_ratio" in r]
        pred = statistics.median(r["prediction"]["predicted_epoch_s"] for r in done) if done else None
        meas = statistics.median(r["measured_epoch_s"] for r in done) if done else None
        ms = [r["measured_epoch_s"] for r in done]
        out.append({"cluster": cluster, "what": what, "repeats": len(rs), "measured_n": len(done),
                    "predicted_epoch_s": pred, "measured_epoch_s": meas,
                    "error_ratio": (pred - meas) / meas if done else None,
                    "measured_spread": max(ms) / min(ms) - 1 if len(ms) > 1 else None,
                    "per_run_errors": [r["error_ratio"] for r in done]})
    return out


def table(report: Report) -> str:
    out = []
    for r in report.results["rows"]:
        p = r.get("prediction") or {}
        config = p.get("budgets") or "-"
        if p.get("placement"):
            config = f"{config}; workers {p['placement']}"
        span = f" ({fmt(p.get('predicted_lo_s'), '.1f')}–{fmt(p.get('predicted_hi_s'), '.1f')})" if p else ""
        out.append([r["cluster"], r["what"], fmt(r.get("steady_epoch_s"), ".1f"), config,
                    fmt(p.get("predicted_epoch_s"), ".1f") + span, fmt(r.get("measured_epoch_s"), ".1f"),
                    fmt(r.get("error_ratio"), "+.1%"), fmt(r.get("compute_realised_ratio"), ".2f"),
                    fmt(r.get("error_at_realised"), "+.1%"), p.get("transfer_source") or "-"])
    head = ["cluster", "what-if", "unequal epoch s", "configuration run (cores per host)", "predicted s (95%)",
            "measured s", "error", "compute realised / assumed", "error at realised compute", "transfer from"]
    res = report.results
    summary = [[r["cluster"], r["what"], f"{r['measured_n']}/{r['repeats']}", fmt(r["predicted_epoch_s"], ".1f"),
                fmt(r["measured_epoch_s"], ".1f"), fmt(r["error_ratio"], "+.1%"), fmt(r["measured_spread"], ".1%"),
                ", ".join(fmt(e, "+.1%") for e in r["per_run_errors"]) or "-"] for r in res.get("summary", [])]
    shead = ["cluster", "what-if", "runs", "predicted s (median)", "measured s (median)", "error",
             "measured spread (max/min - 1)", "error of each run"]
    note = (f"|error| max {fmt(res['abs_error_max'], '.1%')}, median {fmt(res['abs_error_median'], '.1%')} "
            f"over {res.get('rows_measured', 0)} cluster what-if(s), each the median over its repeats "
            f"(target <= {TARGET_ROW:.0%} per row, <= {TARGET_MEDIAN:.0%} median): "
            f"{'met' if res['meets_target'] else 'missed' if res['meets_target'] is False else 'not measured'}")
    if res.get("abs_error_median_at_realised") is not None:
        note += (f". At the compute each configuration really gave its workers (a diagnostic, not the target): "
                 f"|error| max {fmt(res['abs_error_max_at_realised'], '.1%')}, median "
                 f"{fmt(res['abs_error_median_at_realised'], '.1%')}")
    return (f"{heading(report)}\n\n{markdown_table(shead, summary, right=(2, 3, 4, 5, 6))}\n\n{note}.\n\n"
            f"Every run:\n\n{markdown_table(head, out, right=(2, 4, 5, 6, 7, 8))}")


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_repeats=1)
    p.add_argument("--epochs", type=int, default=3, help="epochs per run (steady figures need >= 2)")
    p.add_argument("--clusters", default=",".join(CLUSTERS), help=f"comma-separated, of: {', '.join(CLUSTERS)}")
    args = p.parse_args(argv)
    args.clusters = choice_list("--clusters", args.clusters, list(CLUSTERS))
    args = finish_args(args)
    if args.smoke:
        args.clusters, args.epochs = ["2w 1.5/0.5"], 2
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
