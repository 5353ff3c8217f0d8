"""``perfkit tune``: the advice of a multi-worker configuration, tried.

It runs the single-machine baseline and the configuration as given (the default), reads the default's
advice (``analysis/advice/``), and runs the top K pieces of advice that are perfkit options, one at a time
on the same configuration, then the combination of those that gained, each of its rounds with one more
default run. With repeats, every round runs the
default and each change in turn, the order turned one place each round (``studies/rounds.py``), so that drift of
the machine is shared out instead of posing as a gain.
Every run is an ordinary run (label ``tune-...``) that ``perfkit analyze`` reads; the comparison of predicted
against measured is ``analysis/tuning.py``. Running is the caller's (``train``: the CLI's progress display).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfkit.analysis.advice import Advice, advice_of
from perfkit.analysis.advice.words import change_text
from perfkit.config import Knobs, Mode, RunConfig, sanitize_id
from perfkit.errors import PerfkitError
from perfkit.studies.rounds import rounds
from perfkit.trainer.multi import MultiOptions

DEFAULT = "default"
COMBINED = "combined"

# (config, cluster, the change tried, run.json's ``tries``: empty for the baseline and the default) -> run dir
TrainChange = Callable[[RunConfig, "MultiOptions | None", str, dict[str, Any]], Path]


@dataclass(frozen=True)
class Trial:
    """One configuration tune runs: the default (no advice), one piece of advice, or several combined, and
    the runs that tried it (several with repeats); ``failed`` holds each failure's error."""

    advice: tuple[Advice, ...] = ()
    runs: tuple[Path, ...] = ()
    failed: tuple[str, ...] = ()

    @property
    def change(self) -> str:
        """Its name in the progress, the run labels and the table: "default", the flag, or "combined: ..."."""
        flags = [str(change_text(a.change)) for a in self.advice]
        if not flags:
            return DEFAULT
        return flags[0] if len(flags) == 1 else f"{COMBINED}: {', '.join(flags)}"

    def knobs(self, base: Knobs) -> Knobs:
        """``base`` with every change of its advice made (each checked as its flag would be)."""
        for a in self.advice:
            base = a.change.knobs(base) if a.change is not None else base
        return base


@dataclass(frozen=True)
class TuneResult:
    baseline: Path
    default_run: Path  # the first default run: the advice was read from it
    advice: tuple[Advice, ...]  # its advice, ranked
    tried: tuple[Trial, ...] = field(default_factory=tuple)


def tune(cfg: RunConfig, opts: MultiOptions, results_dir: Path, train: TrainChange, top: int, repeats: int,
         say: Callable[[str], None]) -> TuneResult:
    """Baseline, default, then the top ``top`` options of its advice and their combination, ``repeats``
    rounds each (the default once more per extra round, and once in each round of the combination)."""
    from perfkit.analysis.analyze import analyze

    say("the single-machine baseline")
    baseline = train(replace(cfg, mode=Mode.single, knobs=Knobs(), label=_label(cfg, "baseline")), None,
                     "baseline", {})
    say("the configuration as given (default)")
    first = train(_with(cfg, Trial()), opts, DEFAULT, {})
    analysis = analyze([baseline, first], results_dir, baseline.name)
    table = analysis.advice[analysis.advice["run_id"] == first.name] if not analysis.advice.empty else analysis.advice
    advice = tuple(advice_of(r) for r in table.itertuples(index=False))
    changes = [Trial((a,)) for a in advice if a.change is not None and a.change.is_knob][:top]
    tried = {DEFAULT: Trial(runs=(first,))} | {t.change: t for t in changes}
    for r, key in rounds([DEFAULT] + [t.change for t in changes], repeats):
        if (r, key) != (0, DEFAULT):  # the first round's default ran already: its advice was read from it
            tried[key] = _try(tried[key], cfg, opts, train, say, f"{key} (round {r + 1}/{repeats})", first)
    gains = [t for t in tried.values() if t.advice and _gained(t, tried[DEFAULT], results_dir)]
    if len(gains) > 1:
        both = Trial(tuple(a for t in gains for a in t.advice))
        tried[COMBINED] = both
        for r, key in rounds([COMBINED, DEFAULT], repeats):  # the default again: drift since is shared too
            what = "the combination" if key == COMBINED else DEFAULT
            tried[key] = _try(tried[key], cfg, opts, train, say, f"{what} (round {r + 1}/{repeats})", first)
    return TuneResult(baseline, first, advice, tuple(tried.values()))


def _label(cfg: RunConfig, what: str) -> str:
    return "-".join(p for p in (cfg.label, "tune", sanitize_id(what, "--label")[:40]) if p)


def _with(cfg: RunConfig, trial: Trial) -> RunConfig:
    return replace(cfg, knobs=trial.knobs(cfg.knobs), label=_label(cfg, trial.change.split(":")[0]))


def _try(t: Trial, cfg: RunConfig, opts: MultiOptions, train: TrainChange, say: Callable[[str], None],
         what: str, advised: Path) -> Trial:
    """One more run of ``t``; a change TensorFlow rejects or a run that fails is recorded, not raised."""
    say(what)
    try:
        return replace(t, runs=(*t.runs, train(_with(cfg, t), opts, t.change, tries(t, advised))))
    except PerfkitError as exc:
        return replace(t, failed=(*t.failed, str(exc).splitlines()[0]))


def tries(t: Trial, advised: Path) -> dict[str, Any]:
    """run.json's ``tries`` of a run of ``t``: the run whose advice it tries, the causes it acts on and the
    speedup over that run predicted (the analysis sets it beside the waterfall's term); the default: none."""
    from perfkit.analysis.tuning import predicted_for

    if not t.advice:
        return {}
    speedup, lo, hi = predicted_for(t.advice)
    return {"run_id": advised.name, "kinds": [a.kind.value for a in t.advice], "predicted_speedup": speedup,
            "predicted_lo": lo, "predicted_hi": hi}


def _gained(t: Trial, default: Trial, results_dir: Path) -> bool:
    """Whether a change ran, beat the default's steady epoch and kept its accuracy."""
    from perfkit.analysis.tuning import gained

    return gained(t.runs, default.runs, results_dir)
