"""`perfkit compare`: the whole study in one command — the single-machine baseline, then the multi-worker
run on the same data, then their analysis with the verdict."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from perfkit.cli import _shared as opt
from perfkit.cli._shared import Format, app, default_html_path, train_once, write_outputs
from perfkit.config import PRESETS, Mode, RunConfig
from perfkit.errors import UsageError


@app.command("compare")
def compare_command(
    preset: Annotated[str, typer.Option(help=f"Workload size for both runs: {', '.join(PRESETS)}.")] = "quick",
    cluster: Annotated[Optional[Path], typer.Option(help="Multi-worker run on this cluster file (local hosts are "
                                                    "emulated with their CPU budgets).", show_default=False)] = None,
    workers: Annotated[Optional[int], typer.Option(help="Multi-worker run with N workers on 127.0.0.1 "
                                                   "(default 2 when no --cluster).", show_default=False)] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Override the preset's epochs.", show_default=False)] = None,
    workload: Annotated[Optional[str], typer.Option(help="What both runs train: botdetector (default), or your "
                                                    "module:attr or path/to/file.py:attr (docs/workloads.md).",
                                                    show_default=False)] = None,
    results_dir: Annotated[Path, typer.Option(help="Where both run directories are created.")] = Path("results"),
    label: Annotated[Optional[str], typer.Option(help="Appended to both run ids.", show_default=False)] = None,
    pin: Annotated[bool, typer.Option("--pin/--no-pin", help="Pin workers to cores and cap TF threads.")] = True,
    connect_timeout: Annotated[float, typer.Option(help="Seconds for the cluster to form.")] = 120.0,
    no_profile: Annotated[bool, typer.Option("--no-profile", help="No profiler trace window (the straggler "
                                             "figures become CPU-based estimates).")] = False,
    profile_retries: Annotated[int, typer.Option(help="Try a lost profiler capture again this many times.")] = 3,
    html: Annotated[Optional[Path], typer.Option(help="HTML report path (default: <results-dir>/analysis/"
                                                 "<UTC time>/report.html).", show_default=False)] = None,
    allow_unenforced: Annotated[bool, typer.Option("--allow-unenforced", help="Run emulated hosts even where "
                                                   "their CPU budgets cannot be enforced (budget figures are "
                                                   "then marked).")] = False,
    verify: Annotated[bool, typer.Option("--verify", help="Then run the what-ifs as predicted (the emulated "
                                         "cluster at the budgets that give equal workers; the proposed workers per "
                                         "host) and report predicted vs measured.")] = False,
    modes: Annotated[str, typer.Option(help="The runs, comma-separated: single (the baseline, always first), "
                                       "multi (synchronous), ps (asynchronous: ParameterServerStrategy; the "
                                       "cluster file's ps and chief, or --ps with --workers).")] = "single,multi",
    ps: Annotated[Optional[int], typer.Option("--ps", help="ps with --workers: parameter servers (default 1).",
                                              show_default=False)] = None,
    steps_per_execution: opt.StepsPerExecution = 1,
    metrics: opt.Metrics = "full",
    bytes_per_pack: opt.BytesPerPack = 0,
    all_reduce: opt.AllReduce = "ring",
    prefetch: opt.Prefetch = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No training progress; still the verdict.")] = False,
    live: opt.Live = False,
) -> None:
    """Run single, then multi (and ps), on the same data, and say how much faster each was and why not more."""
    if cluster is not None and workers is not None:
        raise UsageError("--cluster/--workers: give one of them, not both")
    if html is not None and html.is_dir():
        raise UsageError(f"--html: {html} is a directory; give a file path")
    display = opt.Display.of(quiet, live)
    # Everything is checked before the first minute of training is spent.
    from perfkit.trainer.options import compare_clusters, knobs_for_modes, parse_modes
    from perfkit.workloads import checked, config_overrides

    chosen = parse_modes(modes)
    # One set of knobs for every run; each mode gets those its strategy has (the rest recorded as not applied).
    knobs = knobs_for_modes(opt.knobs(steps_per_execution, metrics, bytes_per_pack, all_reduce, prefetch), chosen)
    if verify and "multi" not in chosen:
        raise UsageError("--verify: verifies the multi run's what-if; add multi to --modes")
    profiling = {"profile_steps": "off" if no_profile else "auto", "profile_retries": profile_retries,
                 **config_overrides(workload, preset, None, None)}
    cfgs = {m: checked(RunConfig.from_preset(Mode(m), preset, epochs=epochs, label=label, knobs=knobs[m][0],
                                             **profiling)) for m in chosen}
    if "ps" in cfgs:
        cfgs["ps"] = replace(cfgs["ps"], profile_steps="off")
    clusters = compare_clusters(cfgs, workers, cluster, ps, pin, connect_timeout, allow_unenforced)
    from perfkit.trainer.hosts.hostenv import preflight

    opts = clusters.get("multi")
    if verify and not opts.emulate:
        raise UsageError("--verify: needs an emulated cluster (--cluster FILE with local addresses): the what-if "
                         "is realised with CPU budgets")
    for o in clusters.values():
        preflight(o)  # budgets that cannot be enforced, a link that cannot be shaped: said now, not after the baseline
    checks = (["equal workers"] + (["placement"] if len(opts.cluster.hosts) > 1 else [])) if verify else []
    total = len(chosen) + 1 + len(checks)
    typer.echo(f"1/{total} single-machine baseline ({preset} preset)")
    base = train_once(cfgs["single"], None, results_dir, None, display, **_extra(knobs["single"][1]))
    paths, notes = [base], []
    for i, (m, o) in enumerate(clusters.items(), start=2):
        ps_part = f" and {o.cluster.num_ps} parameter server(s), asynchronous" if m == "ps" else ""
        typer.echo(f"{i}/{total} {m} run: {o.cluster.num_workers} workers{ps_part} on {len(o.cluster.hosts)} host(s)")
        paths.append(train_once(cfgs[m], o, results_dir, None, display, **_extra(knobs[m][1])))
    from perfkit.analysis.analyze import analyze

    analysis = analyze(paths, results_dir, base.name)
    run, multi = (paths[1 + list(clusters).index("multi")], cfgs["multi"]) if opts is not None else (None, None)
    for i, what in enumerate(checks, start=len(chosen) + 1):
        typer.echo(f"{i}/{total} verification: the {what} what-if, run as predicted")
        try:
            paths.append(_verify(analysis, run, multi, opts, results_dir, display, what))
        except UsageError as exc:  # cannot be realised here: the verdict says so, the two runs still count
            notes.append(f"Not verified: {exc}.")
            typer.echo(f"    {exc}")
    if checks:
        analysis = analyze(paths, results_dir, base.name)
        analysis = replace(analysis, verdict=(*analysis.verdict, *notes))
    typer.echo(f"{total}/{total} analysis")
    write_outputs(analysis, Format.table, None, html or default_html_path(results_dir), None, verdict_last=True)


def _extra(meta: dict[str, Any]) -> dict[str, Any]:
    """train_once's ``extra_meta`` when there is any (a knob not applied to this mode)."""
    return {"extra_meta": meta} if meta else {}


def _verify(analysis: Any, run: Path, cfg: RunConfig, opts: Any, results_dir: Path, display: opt.Display,
            what: str) -> Path:
    """Run the configuration that realises ``run``'s what-if (same data and workload)."""
    from perfkit.trainer.options import verification

    vcfg, vopts, extra = verification(analysis, run, cfg, opts, what)
    return train_once(vcfg, vopts, results_dir, None, display, extra_meta=extra)
