"""``perfkit tune``: the advice of a multi-worker configuration, tried.

It runs the single-machine baseline and the configuration as given (the default), reads the default's
advice (``analysis/advice.py``), and runs the top K pieces of advice that are perfkit options, one at a time
on the same configuration, then the combination of those that gained, each of its rounds with one more
default run. With repeats, every round runs the
default and each change in turn, the order turned one place each round (``rounds.py``), so that drift of
the machine is shared out instead of posing as a gain.
Every run is an ordinary run (label ``tune-...``) that ``perfkit analyze`` reads; the comparison of predicted
against measured is ``analysis/tuning.py``. Running is the caller's (``train``: the CLI's progress display).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfkit.config import KNOB_FLAGS, Knobs, Mode, RunConfig, sanitize_id
from perfkit.errors import PerfkitError
from perfkit.trainer.multi import MultiOptions
from perfkit.trainer.rounds import turned

DEFAULT = "default"
COMBINED = "combined"
FIELD_OF_FLAG = {flag: name for name, flag in KNOB_FLAGS.items()}

Train = Callable[[RunConfig, "MultiOptions | None", str], Path]  # (config, cluster, what) -> run directory


@dataclass(frozen=True)
class Tried:
    """One change and the runs that tried it (several with repeats); ``failed`` holds each failure's error."""

    change: str  # "default", a knob flag with its value ("--metrics minimal"), or "combined"
    knobs: dict[str, Any]
    runs: tuple[Path, ...] = ()
    failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class TuneResult:
    baseline: Path
    default_run: Path  # the first default run: the advice was read from it
    advice: Any  # its advice table (DataFrame)
    tried: tuple[Tried, ...] = field(default_factory=tuple)


def knob_change(flag_text: str) -> dict[str, Any] | None:
    """'--metrics minimal' -> {'metrics': 'minimal'}; None for advice that is not one perfkit option."""
    flag, _, value = str(flag_text).partition(" ")
    name = FIELD_OF_FLAG.get(flag)
    if name is None or not value:
        return None
    knobs = Knobs.from_dict({name: int(value) if value.isdigit() else value})  # checked like the flag
    return {name: getattr(knobs, name)}


def tune(cfg: RunConfig, opts: MultiOptions, results_dir: Path, train: Train, top: int, repeats: int,
         say: Callable[[str], None]) -> TuneResult:
    """Baseline, default, then the top ``top`` options of its advice and their combination, ``repeats``
    rounds each (the default once more per extra round, and once in each round of the combination)."""
    from perfkit.analysis.analyze import analyze

    say("the single-machine baseline")
    baseline = train(replace(cfg, mode=Mode.single, knobs=Knobs(), label=_label(cfg, "baseline")), None,
                     "baseline")
    say("the configuration as given (default)")
    first = train(_with(cfg, {}, DEFAULT), opts, DEFAULT)
    analysis = analyze([baseline, first], results_dir, baseline.name)
    advice = analysis.advice[analysis.advice["run_id"] == first.name] if not analysis.advice.empty else analysis.advice
    changes = [(str(k), c) for k in advice["knob"] for c in [knob_change(k)] if c is not None][:top]
    tried = {DEFAULT: Tried(DEFAULT, {}, (first,))} | {k: Tried(k, c) for k, c in changes}
    for round_ in range(repeats):  # the first default ran already; later rounds turn the order (rounds.py)
        for change, knobs in (turned([(DEFAULT, {})] + changes, round_) if round_ else changes):
            tried[change] = _try(tried[change], cfg, opts, train, say, f"{change} (round {round_ + 1}/{repeats})")
    gains = [t for t in tried.values() if t.change != DEFAULT and _gained(t, tried[DEFAULT], results_dir)]
    if len(gains) > 1:
        both = {k: v for t in gains for k, v in t.knobs.items()}
        tried[COMBINED] = Tried(COMBINED + ": " + ", ".join(t.change for t in gains), both)
        for round_ in range(repeats):  # with the default again, so drift since the first rounds is shared too
            for key in turned([COMBINED, DEFAULT], round_):
                what = "the combination" if key == COMBINED else DEFAULT
                tried[key] = _try(tried[key], cfg, opts, train, say, f"{what} (round {round_ + 1}/{repeats})")
    return TuneResult(baseline, first, advice, tuple(tried.values()))


def _label(cfg: RunConfig, what: str) -> str:
    return "-".join(p for p in (cfg.label, "tune", sanitize_id(what, "--label")[:40]) if p)


def _with(cfg: RunConfig, knobs: dict[str, Any], what: str) -> RunConfig:
    return replace(cfg, knobs=replace(cfg.knobs, **knobs), label=_label(cfg, what))


def _try(t: Tried, cfg: RunConfig, opts: MultiOptions, train: Train, say: Callable[[str], None],
         what: str) -> Tried:
    """One more run of ``t``; a change TensorFlow rejects or a run that fails is recorded, not raised."""
    say(what)
    try:
        return replace(t, runs=(*t.runs, train(_with(cfg, t.knobs, t.change.split(":")[0]), opts, t.change)))
    except PerfkitError as exc:
        return replace(t, failed=(*t.failed, str(exc).splitlines()[0]))


def _gained(t: Tried, default: Tried, results_dir: Path) -> bool:
    """Whether a change ran, beat the default's steady epoch and kept its accuracy."""
    from perfkit.analysis.tuning import gained

    return gained(t.runs, default.runs, results_dir)
