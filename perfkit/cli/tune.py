"""`perfkit tune`: run the top pieces of advice for a multi-worker configuration, one at a time and then
combined, and report each one's predicted gain against its measured gain (perfkit/studies/tune.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from perfkit.cli import _shared as opt
from perfkit.cli._shared import Display, app, train_once
from perfkit.config import PRESETS, Mode, RunConfig
from perfkit.errors import UsageError


@app.command("tune")
def tune_command(
    preset: Annotated[str, typer.Option(help=f"Workload size: {', '.join(PRESETS)}.")] = "quick",
    cluster: opt.ClusterFile = None,
    workers: Annotated[Optional[int], typer.Option(help="N workers on 127.0.0.1 (default 2 when no --cluster).",
                                                   show_default=False)] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Override the preset's epochs.", show_default=False)] = None,
    try_: Annotated[int, typer.Option("--try", help="Try the top K pieces of advice that are perfkit options.")] = 3,
    repeats: Annotated[int, typer.Option(help="Rounds: each runs the default and every change once, in turn.")] = 1,
    workload: Annotated[Optional[str], typer.Option(help="What to train: botdetector (default) or your "
                                                    "module:attr (docs/workloads.md).", show_default=False)] = None,
    results_dir: opt.ResultsDir = Path("results"),
    label: opt.Label = None,
    pin: opt.Pin = True,
    allow_unenforced: opt.AllowUnenforced = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No training progress; still the table.")] = False,
) -> None:
    """Run the baseline and the configuration, then its advice, tried: predicted against measured gain."""
    if try_ < 1 or repeats < 1:
        raise UsageError(f"--try/--repeats: {try_}/{repeats}: both must be at least 1")
    if cluster is not None and workers is not None:
        raise UsageError("--cluster/--workers: give one of them, not both")
    from perfkit.studies.tune import tune
    from perfkit.trainer.hosts.hostenv import preflight
    from perfkit.trainer.options import compare_clusters
    from perfkit.workloads import checked, config_overrides

    cfg = checked(RunConfig.from_preset(Mode.multi, preset, epochs=epochs, label=label,
                                        **config_overrides(workload, preset, None, None)))
    opts = compare_clusters({"multi": cfg}, workers, cluster, None, pin, 120.0, allow_unenforced)["multi"]
    preflight(opts)
    step = iter(range(1, 10_000))

    def train(c: RunConfig, o: Any, what: str, tries: dict[str, Any]) -> Path:
        return train_once(c, o, results_dir, None, Display.of(quiet), extra_meta={"tries": tries} if tries else None)

    result = tune(cfg, opts, results_dir, train, try_, repeats, lambda what: typer.echo(f"{next(step)}. {what}"))
    _report(result, results_dir)


def _report(result: Any, results_dir: Path) -> None:
    from rich.console import Console

    from perfkit.analysis.analyze import analyze
    from perfkit.analysis.renderers import RenderOptions, console
    from perfkit.analysis.tuning import TriedRuns, predicted_for, tried_table, tuned_run
    from perfkit.results import utc_now, write_json

    runs = [TriedRuns(t.change, t.runs, t.failed, predicted_for(t.advice)) for t in result.tried]
    table, _ = tried_table(result.baseline, runs, results_dir)
    tuned = tuned_run(table) or result.default_run.name
    out = results_dir / "tune" / f"tune-{utc_now().replace(':', '').replace('-', '').split('.')[0]}Z.json"
    write_json(out, {"baseline": result.baseline.name, "advice_from": result.default_run.name, "tuned": tuned,
                     "tried": json.loads(table.to_json(orient="records"))})
    Console(width=max(Console().width, 130)).print(console.tried_table(table, result.default_run.name))
    final = analyze([result.baseline, results_dir / tuned], results_dir, result.baseline.name)
    console.render(final, typer.get_text_stream("stdout"), RenderOptions(verdict_only=True))
    typer.echo(f"tuned: {tuned}; the table as JSON: {out}")
