"""``perfkit check overhead``: what perfkit's recording costs a training on this machine.

Three arms train the same built-in workload on the same cached data with the same ``fit``, each in a
process of its own, repeated in rounds whose order turns one place each round (``studies/rounds.py``):
- ``bare``: ``python -m perfkit.trainer.worker.bare``, no instrument at all;
- ``untraced``: ``perfkit run --mode single --no-profile``: the CPU sampler and the step records;
- ``traced``: the same with its trace window (``--profile-steps auto``), as ``perfkit run`` does by default.
Each run's figure is its steady epoch: the median wall time (Keras' epoch begin to end, on every arm) of the
epochs after the first. An instrumented run is set against the bare run of its own round; the rounds'
ratios carry the machine's noise as well as perfkit's cost, so ``overhead_summary`` gives their median,
their range and N, never one run's ratio alone.

How each arm is run is passed in (``Runner``): the unit tests give their own epochs instead of training.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perfkit.errors import PerfkitError, UsageError
from perfkit.studies.rounds import rounds

ARMS = ("bare", "untraced", "traced")
_RUN_FLAGS = {"untraced": ("--no-profile",), "traced": ("--profile-steps", "auto")}


@dataclass(frozen=True)
class OverheadSpec:
    """What to train and how often: a preset, optionally smaller, and the rounds."""

    preset: str = "quick"
    repeats: int = 3
    results_dir: Path = Path("results")
    epochs: int | None = None
    train_players: int | None = None
    test_players: int | None = None
    timeout_s: float = 3600.0  # one arm's run

    def sizes(self) -> list[str]:
        """The flags both ``perfkit run`` and the bare worker take for the sizes given."""
        pairs = (("--epochs", self.epochs), ("--train-players", self.train_players),
                 ("--test-players", self.test_players))
        return [text for flag, value in pairs if value is not None for text in (flag, str(value))]


@dataclass(frozen=True)
class ArmRun:
    """One arm's run in one round: each epoch's wall seconds, or why there are none."""

    round: int
    arm: str
    epoch_wall_s: tuple[float, ...] = ()
    run_dir: str | None = None  # a perfkit run's directory (none for the bare arm)
    error: str | None = None

    @property
    def steady_epoch_s(self) -> float:
        walls = self.epoch_wall_s[1:] or self.epoch_wall_s
        return float(statistics.median(walls)) if walls and self.error is None else math.nan


Runner = Callable[[int, str, OverheadSpec], ArmRun]


def check_overhead(spec: OverheadSpec, run: Runner | None = None,
                   progress: Callable[[ArmRun], None] = lambda r: None) -> pd.DataFrame:
    """Every arm ``spec.repeats`` times, round by round: one row per run (round, arm, steady epoch, ...)."""
    if spec.repeats < 1:
        raise UsageError(f"--repeats: {spec.repeats} is not a positive number of rounds")
    run = run or run_arm
    rows = []
    for r, arm in rounds(ARMS, spec.repeats):
        done = run(r, arm, spec)
        progress(done)
        rows.append({"round": done.round, "arm": done.arm, "steady_epoch_s": done.steady_epoch_s,
                     "epochs": len(done.epoch_wall_s), "run_dir": done.run_dir, "error": done.error})
    return pd.DataFrame(rows)


def overhead_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm: runs kept, median steady epoch, and each instrumented arm's ratio to the bare run of the
    same round (median, min, max over the rounds where both ran); ``n`` counts those rounds."""
    ok = runs[runs["error"].isna() & runs["steady_epoch_s"].notna()]
    bare = ok[ok["arm"] == "bare"].set_index("round")["steady_epoch_s"]
    rows = []
    for arm in ARMS:
        mine = ok[ok["arm"] == arm].set_index("round")["steady_epoch_s"]
        ratios = (mine / bare).dropna() if arm != "bare" else pd.Series(dtype=float)
        failed = int(((runs["arm"] == arm) & runs["error"].notna()).sum())
        rows.append({"arm": arm, "runs": int(len(mine)), "failed": failed,
                     "steady_epoch_s": float(mine.median()) if len(mine) else math.nan,
                     "n": int(len(ratios)), "ratio": float(ratios.median()) if len(ratios) else math.nan,
                     "ratio_min": float(ratios.min()) if len(ratios) else math.nan,
                     "ratio_max": float(ratios.max()) if len(ratios) else math.nan})
    return pd.DataFrame(rows)


def run_arm(round_index: int, arm: str, spec: OverheadSpec) -> ArmRun:
    """``arm``'s run as a process of its own; a failed run is an ``ArmRun`` with its error, not an exception."""
    command = _command(arm, spec)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=spec.timeout_s)
    except subprocess.TimeoutExpired:
        return ArmRun(round_index, arm, error=f"the {arm} run did not end within {spec.timeout_s:g} s")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return ArmRun(round_index, arm, error=f"the {arm} run failed: {last}")
    if arm == "bare":
        return _bare_result(round_index, proc.stdout)
    lines = proc.stdout.strip().splitlines()
    run_dir = Path(lines[-1]) if lines else None
    if run_dir is None or not run_dir.is_dir():
        return ArmRun(round_index, arm, error=f"the {arm} run printed no run directory")
    try:
        return ArmRun(round_index, arm, _run_epochs(run_dir), run_dir=str(run_dir))
    except PerfkitError as exc:
        return ArmRun(round_index, arm, run_dir=str(run_dir), error=f"the {arm} run cannot be read: {exc}")


def _command(arm: str, spec: OverheadSpec) -> list[str]:
    if arm == "bare":
        return [sys.executable, "-m", "perfkit.trainer.worker.bare", "--preset", spec.preset,
                "--cache-dir", str(spec.results_dir / "datasets"), *spec.sizes()]
    return [sys.executable, "-m", "perfkit", "run", "--mode", "single", "--preset", spec.preset, *spec.sizes(),
            *_RUN_FLAGS[arm], "--label", f"check-{arm}", "--results-dir", str(spec.results_dir), "--quiet"]


def _bare_result(round_index: int, stdout: str) -> ArmRun:
    from perfkit.trainer.worker.bare import read_result

    result = read_result(stdout)
    if result is None:
        return ArmRun(round_index, "bare", error="the bare run printed no result")
    return ArmRun(round_index, "bare", tuple(float(e["wall_s"]) for e in result["epochs"]))


def _run_epochs(run_dir: Path) -> tuple[float, ...]:
    """Each epoch's wall seconds of a perfkit run (the final attempt at each), as the bare arm times them."""
    from perfkit.analysis.summary import final_attempt
    from perfkit.results import RunRecord

    epochs = final_attempt(RunRecord.load(run_dir).epochs).sort_values("epoch")
    return tuple(((epochs["t_end_ns"] - epochs["t_start_ns"]) / 1e9).tolist())
