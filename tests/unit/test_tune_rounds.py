"""``perfkit tune`` and ``perfkit sweep`` run their repeats in rounds whose order turns one place each round
(studies/rounds.py), as the benchmarks' ``interleave`` does: a drift within a round does not land on the
same change every time. Training and the analysis are stood in for; only the order is under test."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from perfkit.analysis.advice import Advice, CauseKind, Change, Prediction, Tried, advice_frame
from perfkit.config import Mode, RunConfig
from perfkit.studies import tune as tune_mod
from perfkit.studies.rounds import turned


def test_each_round_starts_one_place_later() -> None:
    assert [turned("abc", i) for i in range(4)] == [list("abc"), list("bca"), list("cab"), list("abc")]
    assert turned([], 3) == [] and turned("a", 5) == ["a"]


def _fake_tune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gains: tuple[str, ...]) -> list[str]:
    """The calls to ``train``, in order, of a tune whose changes with a word of ``gains`` gain."""
    import perfkit.analysis.analyze as analyze_mod
    import perfkit.analysis.tuning as tuning_mod

    pieces = [Advice(kind, 0.01, share, Change(option, value), "api", Prediction(1.1, 1.0, 1.2), "basis")
              for kind, share, option, value in ((CauseKind.REDUCTIONS, 0.3, "metrics", "minimal"),
                                                 (CauseKind.FRAMEWORK, 0.2, "steps_per_execution", 8),
                                                 (CauseKind.GRADIENTS, 0.1, "bytes_per_pack", 1 << 20))]
    validation = Advice(CauseKind.VALIDATION, 1.0, 0.4, None, "api", Prediction(1.1, 1.1, 1.1), "b",
                        Tried.NOT_AN_OPTION)  # the costliest, but no knob: not tried
    advice = advice_frame([*pieces, validation])
    monkeypatch.setattr(analyze_mod, "analyze", lambda runs, d, b: SimpleNamespace(
        advice=advice.assign(run_id=runs[1].name)))
    monkeypatch.setattr(tuning_mod, "gained", lambda runs, default, d: any(g in r.name for r in runs for g in gains))
    calls: list[str] = []

    def train(cfg: RunConfig, opts: Any, what: str) -> Path:
        calls.append(what)
        path = tmp_path / f"{len(calls)}-{what.split(':')[0].replace(' ', '_')}"
        path.mkdir()
        return path

    cfg = RunConfig.from_preset(Mode.multi, "tiny")
    tune_mod.tune(cfg, SimpleNamespace(), tmp_path, train, top=3, repeats=3, say=lambda s: None)
    return calls


def test_tune_turns_its_rounds_and_runs_the_combination_after(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_tune(tmp_path, monkeypatch, gains=("metrics", "steps"))
    m, s, b = "--metrics minimal", "--steps-per-execution 8", "--bytes-per-pack 1048576"
    assert calls[:2] == ["baseline", "default"]
    # round 1 after the default the advice was read from; rounds 2 and 3 start one place later each
    assert calls[2:5] == [m, s, b]
    assert calls[5:9] == [m, s, b, "default"] and calls[9:13] == [s, b, "default", m]
    # the combination's rounds run the default again beside it, turned too
    c = f"combined: {m}, {s}"
    assert calls[13:] == [c, "default", "default", c, c, "default"]


def test_tune_combines_nothing_when_one_change_gained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_tune(tmp_path, monkeypatch, gains=("metrics",))
    assert len(calls) == 13 and calls.count("default") == 3
