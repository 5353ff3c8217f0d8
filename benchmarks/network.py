"""Benchmark: the communication term as the network between emulated hosts gets slower.

Two emulated hosts with the same CPU budget (one worker each, so neither is a straggler by CPU), each in
its own network namespace; both hosts' links are shaped alike, one setting per arm: unshaped, 10 Gbit/s,
1 Gbit/s, 100 Mbit/s, 20 Mbit/s (and 1 Gbit/s + 5 ms where the kernel has netem). Every arm is a normal
``perfkit run --mode multi --cluster FILE`` with the default trace window; the figures come from
``perfkit analyze``'s split of the traced steps: per step, transfer (the exposed all-reduce of the worker
that waited least), wait (the rest of each worker's all-reduce) and compute, means over workers, and the
steady epoch time. Needs root (namespaces and tc).

    python -m benchmarks network --repeats 1
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from benchmarks._common import (
    Report,
    conclude,
    finish_args,
    fmt,
    heading,
    interleave,
    make_parser,
    markdown_table,
    progress,
    smoke_size,
)
from benchmarks._runs import Training, perfkit_run, runs_dir

NAME = "network"
LINKS: dict[str, dict[str, float]] = {
    "unshaped": {}, "10 Gbit/s": {"bandwidth_mbit": 10_000}, "1 Gbit/s": {"bandwidth_mbit": 1000},
    "100 Mbit/s": {"bandwidth_mbit": 100}, "20 Mbit/s": {"bandwidth_mbit": 20},
}
WITH_NETEM = {"1 Gbit/s + 5 ms": {"bandwidth_mbit": 1000, "latency_ms": 5}}
# --smoke: unshaped and one slow link. 40 Mbit/s still makes the ~1.8 MB of gradients a step the largest term
# (~0.4 s against ~0.1 s of compute) at half 20 Mbit/s's cost: everything that crosses the link (the start-up,
# the steps, and the all-reduce calibration after fit, 18 gradient all-reduces) is paid at its speed.
SMOKE_LINKS: dict[str, dict[str, float]] = {"unshaped": {}, "40 Mbit/s": {"bandwidth_mbit": 40}}


def cluster_file(path: Path, link: dict[str, float]) -> Path:
    text = ", ".join(f"{k} = {v:g}" for k, v in link.items())
    path.write_text("".join(
        f'[[hosts]]\nname = "host{i}"\naddress = "127.0.0.{i + 1}"\ncores = 1\nworkers = 1\nbase_port = 20000\n'
        + (f"link = {{ {text} }}\n" if link else "") for i in range(2)))
    return path


def arms(args: argparse.Namespace) -> dict[str, Callable[[int], Training]]:
    runs = runs_dir(args.results_root, NAME, args.stamp)
    links = dict(LINKS if not args.smoke else SMOKE_LINKS)
    if args.netem and not args.smoke:
        links.update(WITH_NETEM)

    def arm(label: str, link: dict[str, float]) -> Callable[[int], Training]:
        slug = label.replace(" ", "").replace("/", "").replace("+", "-")
        cluster = cluster_file(runs / f"cluster-{slug}.toml", link)
        extra = ["--epochs", str(args.epochs)] if args.epochs else []
        extra += smoke_size(args)
        return lambda i: with_split(perfkit_run(f"{label} #{i + 1}", [
            "--mode", "multi", "--cluster", str(cluster), "--preset", args.preset, *extra], runs, args.timeout))

    return {label: arm(label, link) for label, link in links.items()}


def with_split(t: Training) -> Training:
    """The run's traced step split (``perfkit analyze``), per step and averaged over workers."""
    if t.error or not t.run_dir:
        return t
    from perfkit.analysis.analyze import analyze

    a = analyze([Path(t.run_dir)], Path(t.run_dir).parent)
    row = a.runs.iloc[0]
    w = a.workers
    t.extra.update({
        "split_source": row["split_source"], "largest_term": row["largest_term"],
        "transfer_share": row["transfer_share"], "links": row["links"],
        **{f"{k}_ms": float(w[k].mean() * 1e3) if k in w and w[k].notna().any() else None
           for k in ("step_mean_s", "compute_s", "transfer_s", "wait_s", "input_s")},
        "network_sentence": next((v for v in a.verdict if "network between the workers" in v), None)})
    if row["split_source"] != "trace":
        t.error = f"no traced split ({row['split_note']}): the transfer term would be an estimate"
    return t


def _median(runs: list[Training], key: str) -> float | None:
    vals = sorted(v for v in (r.extra.get(key) if key != "steady_epoch_s" else r.steady_epoch_s for r in runs)
                  if isinstance(v, (int, float)))
    return vals[len(vals) // 2] if vals else None


def measure(args: argparse.Namespace) -> Report:
    report = Report(NAME, {"preset": args.preset, "repeats": args.repeats, "epochs": args.epochs,
                           "netem": args.netem})
    got = interleave(arms(args), args.repeats, progress)
    report.results = {label: {"runs": [t.to_dict() for t in tr],
                              **{k: _median(tr, k) for k in ("steady_epoch_s", "step_mean_s_ms", "compute_s_ms",
                                                             "transfer_s_ms", "wait_s_ms", "transfer_share")},
                              "largest_term": tr[0].extra.get("largest_term") if tr else None}
                      for label, tr in got.items()}
    for tr in got.values():
        report.errors += [f"{t.label}: {t.error}" for t in tr if t.error]
    return report


def table(report: Report) -> str:
    rows = []
    for label, r in report.results.items():
        rows.append([label, fmt(r["steady_epoch_s"], ".1f"), fmt(r["step_mean_s_ms"], ".0f"),
                     fmt(r["compute_s_ms"], ".0f"), fmt(r["transfer_s_ms"], ".1f"), fmt(r["wait_s_ms"], ".1f"),
                     fmt(r["transfer_share"], ".0%"), r["largest_term"] or "-"])
    head = ["link (both hosts)", "steady epoch s", "step ms", "compute ms", "transfer ms", "wait ms",
            "transfer share", "largest term"]
    return f"{heading(report)}\n\n{markdown_table(head, rows, right=(1, 2, 3, 4, 5, 6))}"


def _netem() -> bool:
    from perfkit.trainer.hosts.netns import netem_available, why_unavailable

    if why_unavailable():
        raise SystemExit(f"bench network: needs network namespaces: {why_unavailable()}")
    return netem_available()


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_repeats=1)
    p.add_argument("--epochs", type=int, default=3, help="epochs per run (steady figures need >= 2)")
    args = p.parse_args(argv)
    args = finish_args(args)
    args.netem = _netem()
    if not args.netem:
        progress("this kernel has no netem qdisc: the latency arm is left out (bandwidth uses tbf)")
    if args.smoke:
        # One epoch of the smoke's 4 steps: the figures come from the traced steps' split (window: steps 3-4),
        # not from a steady epoch, and at 40 Mbit/s every step costs ~0.4 s of transfer.
        args.epochs = 1
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
