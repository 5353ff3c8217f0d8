"""What ``perfkit launch`` costs a training script with no perfkit import (target: ratio <= 1.02).

Two unmodified scripts written the way TensorFlow's multi-worker tutorials write them, examples/keras_fit
(Keras ``fit``) and examples/custom_loop (a custom training loop), A/B interleaved round by round:
- bare: ``python examples/X/train.py ARGS``, as a user runs it;
- launched: ``perfkit launch --mode single -- python examples/X/train.py ARGS``: placed, sampled and
  recorded by whatever perfkit's launcher does to a script it did not write;
- launcher only: the same with ``--no-auto-record``, so the start-up hook's own share (launched / launcher
  only) is told apart from the launcher's (launcher only / bare).
Both sides are timed by one instrument, the epoch times each script prints itself, so the ratio does not
depend on what perfkit records. The figure is the steady step time (median over epochs after the first,
divided by the steps an epoch) and the ratio launched / bare, paired by round.

    python -m benchmarks autorecord --repeats 5
    python -m benchmarks autorecord --launch-args=--no-profile   # the same without the trace window
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
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
    fmt_range,
    heading,
    interleave,
    make_parser,
    markdown_table,
    progress,
    ratio_sentence,
    ratios,
    run_measured,
    stats,
)
from benchmarks._runs import printed_run_dir, runs_dir, steady
from perfkit.errors import PerfkitError, UsageError
from perfkit.results import RunRecord, load_meta

NAME = "autorecord"
TARGET_RATIO = 1.02
MIN_REPEATS = 5  # fewer leave the spread of a ratio this close to 1, and so its verdict, to chance
EXAMPLES = ("keras_fit", "custom_loop")
DEFAULT_TIMEOUT_S = 300.0  # one tiny training; the preset-based default of the other benches is for hours
SMOKE_SIZE = (2, 5)  # epochs, steps an epoch: the smallest run that still has a steady epoch
# What the example scripts print (their docstrings show it): one line an epoch, then the steps trained.
# Anchored at line starts because under perfkit launch they share worker.log with TensorFlow's logging.
_EPOCH_LINE = re.compile(r"^epoch (\d+)/(\d+): loss (\S+) accuracy (\S+) time (\d+(?:\.\d+)?) s\s*$", re.MULTILINE)
_TRAINED_LINE = re.compile(r"^trained (\d+) steps\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Epoch:
    """One printed epoch line."""

    index: int  # 1-based, as printed
    of: int
    loss: float
    accuracy: float
    time_s: float


@dataclass(frozen=True)
class Size:
    """How long each run trains; the example scripts' own flags."""

    epochs: int
    steps_per_epoch: int
    per_worker_batch: int

    def argv(self) -> list[str]:
        return ["--epochs", str(self.epochs), "--steps-per-epoch", str(self.steps_per_epoch),
                "--per-worker-batch", str(self.per_worker_batch)]


@dataclass(frozen=True)
class ScriptRun:
    """One run of an example script, bare or launched, timed by its own epoch lines."""

    label: str
    wall_s: float | None = None  # the whole command, TensorFlow's start-up included
    epoch_s: tuple[float, ...] = ()
    trained_steps: int | None = None
    steady_step_s: float | None = None
    run_dir: str | None = None  # launched only
    recorded_steps: int | None = None  # launched only: step rows perfkit recorded (0: none)
    error: str | None = None


# ---------------------------------------------------------------------------------------- pure parts
def example_scripts(root: Path | None = None) -> dict[str, Path]:
    """Each example's train.py. They live in the checkout, not the package: found beside the directory
    holding ``perfkit`` (an editable install), or under ``root``."""
    base = CHECKOUT / "examples" if root is None else Path(root)
    scripts = {name: base / name / "train.py" for name in EXAMPLES}
    for path in scripts.values():
        if not path.is_file():
            raise UsageError(f"bench {NAME}: example script {path} not found (it needs perfkit's source checkout)")
    return scripts


def parse_epochs(text: str) -> list[Epoch]:
    return [Epoch(int(m[1]), int(m[2]), float(m[3]), float(m[4]), float(m[5])) for m in _EPOCH_LINE.finditer(text)]


def parse_trained_steps(text: str) -> int | None:
    """N of the last ``trained N steps`` line, or None when there is none."""
    found = _TRAINED_LINE.findall(text)
    return int(found[-1]) if found else None


def steady_step_s(epoch_s: Sequence[float], steps_per_epoch: int) -> float | None:
    """The steady epoch (median after the first, as docs/figures.md defines it) over its steps."""
    epoch = steady(list(epoch_s))
    return None if epoch is None or steps_per_epoch < 1 else epoch / steps_per_epoch


def output_problem(epochs: Sequence[Epoch], trained: int | None, size: Size) -> str | None:
    """Why a script's output cannot be measured, or None: every epoch printed once, in order, and all the
    steps asked for trained (a run cut short would otherwise pass for a fast one)."""
    if [e.index for e in epochs] != list(range(1, size.epochs + 1)):
        return f"printed {len(epochs)} epoch line(s) of {size.epochs}"
    if trained is None:
        return "printed no 'trained N steps' line"
    if trained != size.epochs * size.steps_per_epoch:
        return f"trained {trained} steps, expected {size.epochs * size.steps_per_epoch}"
    return None


def read_output(label: str, text: str, size: Size, wall_s: float | None = None) -> ScriptRun:
    """A ScriptRun from a script's output; a failed one (no steady figure) when the output is incomplete."""
    epochs = parse_epochs(text)
    trained = parse_trained_steps(text)
    times = tuple(e.time_s for e in epochs)
    problem = output_problem(epochs, trained, size)
    return ScriptRun(label, wall_s, times, trained, None if problem else steady_step_s(times, size.steps_per_epoch),
                     error=problem)


def example_summary(bare: Sequence[ScriptRun], launched: Sequence[ScriptRun],
                    launcher: Sequence[ScriptRun] = ()) -> dict[str, Any]:
    """The arms of one example and the ratios launched / bare (the target), launcher only / bare and
    launched / launcher only, paired by round; a failed run of either arm leaves its round's ratio out and
    counts it as failed."""
    ratio = ratios([r.steady_step_s for r in launched], [r.steady_step_s for r in bare])
    return {
        "bare": arm_summary(bare), "launched": arm_summary(launched), "ratio": ratio,
        "launcher_only": arm_summary(launcher),
        "launcher_ratio": ratios([r.steady_step_s for r in launcher], [r.steady_step_s for r in bare][:len(launcher)]),
        "hook_ratio": ratios([r.steady_step_s for r in launched][:len(launcher)], [r.steady_step_s for r in launcher]),
        "command_ratio": ratios([measured_wall(r) for r in launched], [measured_wall(r) for r in bare]),
        "meets_target": None if ratio["median"] is None else ratio["median"] <= TARGET_RATIO,
    }


def measured_wall(run: ScriptRun) -> float | None:
    """A run's whole-command time, or None when it failed (a command that died early is not fast)."""
    return None if run.error else run.wall_s


def arm_summary(runs: Sequence[ScriptRun]) -> dict[str, Any]:
    return {
        "runs": [asdict(r) for r in runs],
        "steady_step_s": stats(r.steady_step_s for r in runs),
        "wall_s": stats(measured_wall(r) for r in runs),
        "recorded_steps": [r.recorded_steps for r in runs],
        "errors": [f"{r.label}: {r.error}" for r in runs if r.error],
    }


# ------------------------------------------------------------------------------------------ measuring
def bare_run(label: str, script: Path, size: Size, timeout: float) -> ScriptRun:
    """The script as a user runs it: this interpreter, this environment, nothing of perfkit's."""
    proc = run_measured([sys.executable, str(script), *size.argv()], timeout)
    if not proc.ok:
        return ScriptRun(label, proc.wall_s, error=proc.error())
    return read_output(label, proc.stdout, size, proc.wall_s)


def launched_run(label: str, script: Path, size: Size, results_dir: Path, timeout: float,
                 launch_args: Sequence[str] = ()) -> ScriptRun:
    """``perfkit launch --mode single [LAUNCH_ARGS]`` of the same command; its output is read back from
    worker.log."""
    cmd = [*PERFKIT, "launch", "--mode", "single", *launch_args, "--results-dir", str(results_dir), "--quiet",
           "--", sys.executable, str(script), *size.argv()]
    proc = run_measured(cmd, timeout, env=env_with_repo())
    run_dir = printed_run_dir(proc)
    if not proc.ok or run_dir is None:
        return ScriptRun(label, proc.wall_s, error=proc.error() or "perfkit launch printed no run directory")
    try:
        meta = load_meta(run_dir)
    except PerfkitError as exc:
        return ScriptRun(label, proc.wall_s, run_dir=str(run_dir), error=f"cannot read {run_dir}: {exc}")
    if meta.status != "complete":
        return ScriptRun(label, proc.wall_s, run_dir=str(run_dir), error=f"run {run_dir.name} is {meta.status}: "
                                                                           f"{meta.error}")
    log = run_dir / "workers" / "0" / "worker.log"  # single mode: one worker, index 0
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    run = read_output(label, text, size, proc.wall_s)
    return replace(run, run_dir=str(run_dir), recorded_steps=recorded_steps(run_dir))


def recorded_steps(run_dir: Path) -> int | None:
    """How many step rows perfkit recorded for the script (0: none; None: the run cannot be read)."""
    try:
        return len(RunRecord.load(run_dir).steps)
    except PerfkitError:
        return None


def arms(scripts: dict[str, Path], size: Size, args: argparse.Namespace) -> dict[str, Callable[[int], ScriptRun]]:
    """Both sides of every example, one after the other in each round: drift of the machine hits all alike."""
    runs = runs_dir(args.results_root, NAME, args.stamp)
    out: dict[str, Callable[[int], ScriptRun]] = {}
    for name, script in scripts.items():
        out[f"{name} bare"] = lambda i, n=name, s=script: bare_run(f"{n} bare #{i + 1}", s, size, args.timeout)
        out[f"{name} launched"] = lambda i, n=name, s=script: launched_run(
            f"{n} launched #{i + 1}", s, size, runs, args.timeout, args.launch_args)
        out[f"{name} launcher only"] = lambda i, n=name, s=script: launched_run(
            f"{n} launcher only #{i + 1}", s, size, runs, args.timeout, [*args.launch_args, "--no-auto-record"])
    return out


def measure(args: argparse.Namespace, scripts: dict[str, Path]) -> Report:
    size = Size(args.epochs, args.steps_per_epoch, args.per_worker_batch)
    report = Report(NAME, {"repeats": args.repeats, "mode": "single", "launch_args": list(args.launch_args),
                           **asdict(size), "examples": {name: str(path) for name, path in scripts.items()}})
    report.targets = {"steady_step_ratio_max": TARGET_RATIO}
    got = interleave(arms(scripts, size, args), args.repeats, progress)
    for name in scripts:
        report.results[name] = example_summary(got[f"{name} bare"], got[f"{name} launched"],
                                               got[f"{name} launcher only"])
        report.errors += [e for side in ("bare", "launched", "launcher_only")
                          for e in report.results[name][side]["errors"]]
    verdicts = [report.results[name]["meets_target"] for name in scripts]
    report.results["meets_target"] = None if None in verdicts else all(verdicts)
    return report


# ------------------------------------------------------------------------------------------- the table
def in_ms(s: dict[str, Any]) -> dict[str, Any]:
    """A ``stats`` dict of seconds in milliseconds (what a step is read in)."""
    scale = {k: None if s[k] is None else s[k] * 1e3 for k in ("median", "min", "max")}
    return {**s, **scale, "values": [None if v is None else v * 1e3 for v in s["values"]]}


def per_repeat(values: Sequence[Any], spec: str) -> str:
    return ", ".join(fmt(v, spec) for v in values)


def recorded_text(counts: Sequence[int | None], expected: int) -> str:
    """The launched runs' recorded steps against the steps each trained."""
    known = [c for c in counts if c is not None]
    if not known:
        return "unknown"
    if not any(known):
        return "none"
    low, high = min(known), max(known)
    return f"{low} of {expected}" if low == high else f"{low}–{high} of {expected}"


def example_rows(name: str, r: dict[str, Any], expected_steps: int) -> list[list[str]]:
    rows = []
    for side in ("bare", "launched", "launcher_only"):
        if side not in r or not r[side]["runs"]:
            continue
        step = in_ms(r[side]["steady_step_s"])
        recorded = recorded_text(r[side]["recorded_steps"], expected_steps) if side != "bare" else ""
        rows.append([name, side.replace("_", " "), fmt_range(step), fmt_range(r[side]["wall_s"], ".1f"),
                     per_repeat(step["values"], ".2f"), recorded])
    rows.append([name, "launched / bare", fmt_range(r["ratio"], ".3f"), fmt_range(r["command_ratio"], ".3f"),
                 per_repeat(r["ratio"]["values"], ".3f"), ""])
    for key, label in (("launcher_ratio", "launcher only / bare"), ("hook_ratio", "launched / launcher only")):
        if r.get(key) and r[key]["n"]:
            rows.append([name, label, fmt_range(r[key], ".3f"), "", per_repeat(r[key]["values"], ".3f"), ""])
    return rows


def table(report: Report) -> str:
    p, r = report.params, report.results
    rows = [row for name in p["examples"] for row in example_rows(name, r[name], p["epochs"] * p["steps_per_epoch"])]
    launch = shlex.join(["--mode", p["mode"], *p["launch_args"]])
    head = ["example", "side", "steady step ms", "whole command s", "per repeat", "steps recorded"]
    sentences = [ratio_sentence(f"{name}: steady step-time", r[name]["ratio"], r[name]["meets_target"], TARGET_RATIO)
                 for name in p["examples"]]
    if p["repeats"] < MIN_REPEATS:
        sentences.append(f"Only {p['repeats']} repeat(s): at least {MIN_REPEATS} are needed to judge a ratio this "
                         "close to 1.")
    return (f"{heading(report)}\n\nEach run: {p['epochs']} epochs x {p['steps_per_epoch']} steps, per-worker batch "
            f"{p['per_worker_batch']}; launched = perfkit launch {launch}; step times from the scripts' "
            f"own epoch lines.\n\n{markdown_table(head, rows, right=(2, 3))}\n\n" + "\n".join(sentences))


# ---------------------------------------------------------------------------------------------- main
def parse(argv: list[str] | None) -> argparse.Namespace:
    p = make_parser(NAME, __doc__, default_preset=None, default_repeats=MIN_REPEATS)
    # 6 epochs: an odd count of steady ones, so the median is one epoch's own figure, and one slow epoch
    # (the launched side's traced one: perfkit's auto window lies early in epoch 2) shifts it less than
    # with an even count, whose median averages the two middle epochs.
    p.add_argument("--epochs", type=int, default=6, help="epochs a run (the first is left out of the figure)")
    p.add_argument("--steps-per-epoch", type=int, default=30, help="training steps an epoch")
    p.add_argument("--per-worker-batch", type=int, default=64, help="batch of each worker")
    p.add_argument("--launch-args", type=shlex.split, default=[],
                   help="more perfkit launch options for the launched side, e.g. --launch-args=--no-profile")
    args = p.parse_args(argv)
    if args.timeout is None:
        args.timeout = DEFAULT_TIMEOUT_S
    args = finish_args(args)
    if args.smoke:
        args.epochs, args.steps_per_epoch = SMOKE_SIZE
    if args.epochs < 2 or args.steps_per_epoch < 1 or args.per_worker_batch < 1:
        raise SystemExit("--epochs: at least 2 (the first is not steady); --steps-per-epoch, --per-worker-batch: "
                         "at least 1")
    if args.repeats < MIN_REPEATS and not args.smoke:
        progress(f"warning: --repeats {args.repeats} is under {MIN_REPEATS}: the ratio's spread will say little")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    scripts = example_scripts()  # before anything runs: a missing example is a usage error, not N failures
    return conclude(measure(args, scripts), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
