"""``perfkit check overhead|faults``: perfkit checked on the user's machine, as the user runs it."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from perfkit.cli._shared import app
from perfkit.config import PRESETS, get_preset

if TYPE_CHECKING:
    import pandas as pd

check_app = typer.Typer(help="Check perfkit on this machine: what its recording costs a training, and whether "
                        "it names the faults a cluster has.", no_args_is_help=True)
app.add_typer(check_app, name="check")


@check_app.command("overhead")
def overhead_cmd(
    preset: Annotated[str, typer.Option(help=f"Workload size: {', '.join(PRESETS)}.")] = "quick",
    repeats: Annotated[int, typer.Option(help="Rounds: each runs the three arms, its order turned one place.")] = 3,
    epochs: Annotated[Optional[int], typer.Option(help="Override the preset's epochs (at least 2: the first "
                                                  "is warm-up).")] = None,
    train_players: Annotated[Optional[int], typer.Option(help="Training sequences (players).")] = None,
    test_players: Annotated[Optional[int], typer.Option(help="Validation sequences (players).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Where the runs, the data cache and check/overhead-<UTC "
                                              "time>.json go.")] = Path("results"),
    timeout: Annotated[float, typer.Option(help="Seconds one run may take.")] = 3600.0,
) -> None:
    """Train the built-in workload bare, under perfkit untraced, and under perfkit with its trace window, in
    rounds, and say what perfkit's recording costs a steady epoch here.

    The ratios of each round carry this machine's noise as well as perfkit's cost: read their range and N,
    and give it more rounds on a busy machine."""
    from perfkit.errors import UsageError
    from perfkit.studies.overhead import OverheadSpec, check_overhead, overhead_summary

    get_preset(preset)  # a bad name in one line now, not a failed run per arm
    if epochs is not None and epochs < 2:
        raise UsageError(f"--epochs: {epochs}; at least 2 (the first epoch is warm-up, left out of the figure)")
    spec = OverheadSpec(preset=preset, repeats=repeats, results_dir=results_dir, epochs=epochs,
                        train_players=train_players, test_players=test_players, timeout_s=timeout)
    console = Console(stderr=True)
    runs = check_overhead(spec, progress=lambda r: console.print(_progress_line(r), highlight=False))
    summary = overhead_summary(runs)
    Console().print(_table(summary))
    for line in _sentences(summary):
        typer.echo(line)
    path = _write(results_dir, spec, runs, summary)
    typer.echo(f"written: {path}")
    if runs["error"].notna().any():
        raise typer.Exit(1)


def _progress_line(r: Any) -> str:
    if r.error:
        return f"round {r.round + 1}, {r.arm}: {r.error}"
    return f"round {r.round + 1}, {r.arm}: steady epoch {r.steady_epoch_s:.2f} s"


def _table(summary: pd.DataFrame) -> Table:
    table = Table(title="perfkit's overhead: steady epoch, each arm against the bare run of its round",
                  title_justify="left")
    for col in ("arm", "runs", "steady epoch s", "x bare (median)", "range", "N rounds"):
        table.add_column(col, justify="left" if col == "arm" else "right")
    for r in summary.itertuples(index=False):
        ratio = "" if math.isnan(r.ratio) else f"{r.ratio:.3f}"
        span = "" if math.isnan(r.ratio) else f"{r.ratio_min:.3f}–{r.ratio_max:.3f}"
        steady = "" if math.isnan(r.steady_epoch_s) else f"{r.steady_epoch_s:.2f}"
        table.add_row(r.arm, f"{r.runs}" + (f" ({r.failed} failed)" if r.failed else ""), steady, ratio, span,
                      str(r.n) if r.arm != "bare" else "")
    return table


def _sentences(summary: pd.DataFrame) -> list[str]:
    rows = summary.set_index("arm")
    out = []
    for arm, what in (("untraced", "recording steps and CPU"), ("traced", "recording with a trace window")):
        r = rows.loc[arm]
        if int(r["n"]) == 0:
            out.append(f"{what}: no round where both it and the bare run finished")
            continue
        out.append(f"{what}: {r['ratio'] - 1:+.1%} of a steady epoch (median of {int(r['n'])} rounds; "
                   f"range {r['ratio_min'] - 1:+.1%} to {r['ratio_max'] - 1:+.1%})")
    return out


def _write(results_dir: Path, spec: Any, runs: pd.DataFrame, summary: pd.DataFrame) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(spec).items()}
    return _write_json(results_dir, "overhead", stamp, {
        "params": params, "runs": json.loads(runs.to_json(orient="records")),
        "summary": json.loads(summary.to_json(orient="records"))})


@check_app.command("faults")
def faults_cmd(
    faults: Annotated[Optional[str], typer.Option(
        help="Comma-separated: stop, sleep, lock, link, disk, kill (link and disk need root); default: every "
        "one this machine can inject.", show_default=False)] = None,
    repeats: Annotated[int, typer.Option(help="Trials of each fault, round by round.")] = 1,
    preset: Annotated[str, typer.Option(help=f"Workload size of each run: {', '.join(PRESETS)}.")] = "tiny",
    epochs: Annotated[int, typer.Option(help="Epochs of each run: the fault comes long before the last.")] = 30,
    train_players: Annotated[Optional[int], typer.Option(help="Training sequences (players).")] = None,
    test_players: Annotated[Optional[int], typer.Option(help="Validation sequences (players).")] = None,
    at_epoch: Annotated[int, typer.Option(help="Inject once worker 1 trains in this epoch (0-based) ...")] = 1,
    at_step: Annotated[int, typer.Option(help="... at this step of it or later.")] = 2,
    hang_timeout: Annotated[str, typer.Option(help="Each run's --hang-timeout: SECONDS or auto.")] = "auto",
    results_dir: Annotated[Path, typer.Option(help="Where the trials' runs and check/faults-<UTC time>.json "
                                              "go.")] = Path("results"),
    timeout: Annotated[float, typer.Option(help="Seconds one trial may take.")] = 600.0,
) -> None:
    """Inject faults into real 2-worker runs (a stopped worker, a worker stuck in its own code, a cut link, a
    full disk, a killed launcher) and say whether perfkit named each one right, how fast, and kept the
    failed run's records."""
    from perfkit.errors import UsageError
    from perfkit.studies.faults import FaultSpec, chosen_faults, summarise, trial
    from perfkit.trainer.options import parse_hang_timeout

    names = chosen_faults(faults)
    get_preset(preset)
    parse_hang_timeout(hang_timeout)  # checked once here, not failed in every trial's run
    if repeats < 1:
        raise UsageError(f"--repeats: {repeats} is not a positive number of trials")
    spec = FaultSpec(preset=preset, epochs=epochs, train_players=train_players, test_players=test_players,
                     at_epoch=at_epoch, at_step=at_step, hang_timeout=hang_timeout, timeout_s=timeout)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    root, console, trials = results_dir / f"check-faults-{stamp}", Console(stderr=True), []
    for i in range(repeats):
        for fault in names:
            t = trial(fault, root, i, spec)
            trials.append(t)
            console.print(f"round {i + 1}, {fault}: {'named right' if t.named else 'NOT named right'}"
                          + (f" in {t.detect_s:.1f} s" if t.detect_s is not None else ""), highlight=False)
    summary = summarise(trials)
    Console().print(_faults_table(summary))
    named = sum(t.named for t in trials)
    typer.echo(f"named right in {named} of {len(trials)} trials")
    path = _write_json(results_dir, "faults", stamp, {"params": {**asdict(spec), "faults": names, "repeats": repeats},
                                                      "summary": summary, "trials": [asdict(t) for t in trials]})
    typer.echo(f"written: {path}")
    if named < len(trials):
        raise typer.Exit(1)


def _faults_table(summary: dict[str, Any]) -> Table:
    table = Table(title="faults injected: named right, how fast, the failed run kept", title_justify="left")
    for col in ("fault", "N", "named right", "injection to verdict s, median (max)", "run kept"):
        table.add_column(col, justify="left" if col == "fault" else "right")
    for fault, s in summary.items():
        time_s = "-" if s["detect_s_median"] is None else f"{s['detect_s_median']:.1f} ({s['detect_s_max']:.1f})"
        table.add_row(fault, str(s["n"]), f"{s['named']}/{s['n']}", time_s, f"{s['kept']}/{s['n']}")
    return table


def _write_json(results_dir: Path, check: str, stamp: str, body: dict[str, Any]) -> Path:
    from perfkit.machine import machine_info
    from perfkit.results import utc_now, write_json

    path = results_dir / "check" / f"{check}-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"check": check, "generated": utc_now(), "machine": machine_info(), **body})
    return path
