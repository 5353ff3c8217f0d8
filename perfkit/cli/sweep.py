"""`perfkit sweep`: the scaling study. The baseline and each count of each way (``--ways``: replicas,
workers, ps) as ordinary runs, repeats interleaved, then the curve, the per-step split and the forecast
(perfkit/studies/sweep.py, perfkit/analysis/scaling/study.py). ``--analyze-only SWEEP_DIR`` shows a sweep's
analysis again, a partial one too."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from perfkit.cli import _shared as opt
from perfkit.cli._shared import Format, app, train_once
from perfkit.config import PRESETS, Mode, RunConfig

Ways = Annotated[str, typer.Option(help="How each count N scales, comma-separated: replicas (MirroredStrategy over N "
                                   "logical CPU devices in one process), workers (N MultiWorkerMirrored worker "
                                   "processes), ps (N workers, 1 parameter server and the chief).")]


@app.command("sweep")
def sweep_command(
    workers: Annotated[Optional[str], typer.Option(help="Counts N, comma-separated (e.g. 1,2,4): of each way's "
                                                   "workers or replicas.",
                                                   show_default=False)] = None,
    ways: Ways = "workers",
    repeats: Annotated[int, typer.Option(help="Rounds; each runs the baseline and every point once, in turn.")] = 1,
    scaling: Annotated[str, typer.Option(help="strong: keep the global batch (the article); weak: keep the "
                                         "per-worker batch (global batch = batch x N).")] = "strong",
    cores_per_worker: Annotated[Optional[float], typer.Option(
        help="A scale model: each count runs as N emulated hosts of C cores (CPU budgets), against one such host. "
        "Default: plain local workers against the single-process baseline.", show_default=False)] = None,
    preset: Annotated[str, typer.Option(help=f"Workload size: {', '.join(PRESETS)}.")] = "quick",
    epochs: Annotated[Optional[int], typer.Option(help="Override the preset's epochs.", show_default=False)] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Global batch of one worker.", show_default=False)] = None,
    train_players: Annotated[Optional[int], typer.Option(help="Training sequences.", show_default=False)] = None,
    test_players: Annotated[Optional[int], typer.Option(help="Validation sequences.", show_default=False)] = None,
    forecast: Annotated[Optional[str], typer.Option(
        help="Counts to forecast, comma-separated (default: 2x and 4x the largest run). Each gets a 90% interval "
             "from the model's error on counts left out; beyond 2x the largest count, or from fewer than three "
             "counts, it is marked not supported and gets none. A strong-scaling scale model runs a short probe of "
             "one worker at each run and forecast count's share of the batch.", show_default=False)] = None,
    forecast_cluster: Annotated[Optional[Path], typer.Option(
        help="Also forecast this cluster file's hosts (unequal cores too) as perfkit run --cluster emulates them "
             "on this machine, from the workers way's model.", show_default=False)] = None,
    analyze_only: Annotated[Optional[Path], typer.Option(help="Run nothing: analyse this sweep directory.",
                                                         show_default=False)] = None,
    results_dir: opt.ResultsDir = Path("results"),
    label: opt.Label = None,
    pin: opt.Pin = True,
    allow_unenforced: opt.AllowUnenforced = False,
    no_profile: opt.NoProfile = False,
    fmt: Annotated[Format, typer.Option("--format", help="table: the curve in the terminal; json: the study as "
                                        "JSON on stdout.")] = Format.table,
    html: Annotated[Optional[Path], typer.Option(help="HTML report here (default: <sweep dir>/report.html).",
                                                 show_default=False)] = None,
    no_html: Annotated[bool, typer.Option("--no-html", help="Write no HTML report.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No training progress; still the curve.")] = False,
    live: opt.Live = False,
) -> None:
    """Run the baseline and each count of each way (repeats interleaved), then show speedup, efficiency, the
    per-step split, CPU cost, memory per replica, sync cost per step and the forecast against workers."""
    from perfkit.analysis.scaling.study import default_targets
    from perfkit.cluster import load_cluster
    from perfkit.errors import UsageError
    from perfkit.studies.sweep import parse_counts

    beyond = parse_counts(forecast) if forecast else None
    hosts = load_cluster(forecast_cluster) if forecast_cluster is not None else None  # bad file: one line, nothing run
    if html is not None and no_html:
        raise UsageError("--html and --no-html: give one of them, not both")
    if analyze_only is not None:
        if workers is not None or ways != "workers":
            raise UsageError("--analyze-only: runs nothing; not with --workers or --ways")
        _show(analyze_only, beyond, hosts, fmt, None if no_html else (html or analyze_only / "report.html"))
        return
    if workers is None:
        raise UsageError("--workers: give the worker counts (e.g. 1,2,4), or --analyze-only SWEEP_DIR")
    targets = (*(beyond or default_targets(parse_counts(workers))), *((hosts.num_workers,) if hosts else ()))
    sweep_dir = _run(workers, ways, repeats, scaling, cores_per_worker, preset, epochs, batch_size, train_players,
                     test_players, results_dir, label, pin, allow_unenforced, no_profile,
                     _display(quiet, live, fmt), targets)
    _show(sweep_dir, beyond, hosts, fmt, None if no_html else (html or sweep_dir / "report.html"))


def _display(quiet: bool, live: bool, fmt: Format) -> opt.Display:
    from perfkit.errors import UsageError

    if fmt is Format.json:  # the JSON is stdout, alone
        if live:
            raise UsageError("--live: not with --format json (the JSON goes to stdout alone)")
        return opt.Display.QUIET
    return opt.Display.of(quiet, live)


def _run(workers: str, ways: str, repeats: int, scaling: str, cores_per_worker: float | None, preset: str,
         epochs: int | None, batch_size: int | None, train_players: int | None, test_players: int | None,
         results_dir: Path, label: str | None, pin: bool, allow_unenforced: bool, no_profile: bool,
         display: opt.Display, targets: tuple[int, ...]) -> Path:
    from datetime import datetime, timezone

    from perfkit.studies.sweep import options_for, plan, sweep
    from perfkit.trainer.hosts.hostenv import preflight
    from perfkit.workloads import checked, config_overrides

    bot = config_overrides(None, preset, None, batch_size, train_players=train_players, test_players=test_players)
    cfg = checked(RunConfig.from_preset(Mode.multi, preset, epochs=epochs, batch_size=batch_size, label=label,
                                        profile_steps="off" if no_profile else None, **bot))
    # every bad input: one line, nothing run; the counts to forecast are probed as the counts run
    p = plan(cfg, workers, repeats, scaling, cores_per_worker, ways=ways, targets=targets)
    for way in p.ways:  # budgets this machine cannot enforce
        opts = options_for(p, max(p.counts), pin, allow_unenforced, way)
        if opts is not None:
            preflight(opts)

    def train(c: RunConfig, o: Any, run_id: str) -> Path:
        return train_once(c, o, results_dir, run_id, display)

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    say = (lambda line: typer.echo(line, err=True)) if display is opt.Display.QUIET else typer.echo
    return sweep(cfg, p, results_dir, train, lambda n, way: options_for(p, n, pin, allow_unenforced, way), say,
                 stamp)


def _show(sweep_dir: Path, beyond: Any, hosts: Any, fmt: Format, html: Path | None) -> None:
    from perfkit._atomic import atomic_write
    from perfkit.analysis.renderers import scaling_console, scaling_html, scaling_json
    from perfkit.analysis.scaling.study import study

    s = study(sweep_dir, beyond, hosts)
    if fmt is Format.json:
        scaling_json.render(s, sys.stdout)
    else:
        scaling_console.render(s, sys.stdout)
    if html is not None:
        text = scaling_html.page(s)
        atomic_write(html, lambda fh: fh.write(text.encode("utf-8")))
        typer.echo(f"HTML report: {html}", err=fmt is Format.json)
