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


def _fake_tune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gains: tuple[str, ...],
               tried: list[dict[str, Any]] | None = None) -> list[str]:
    """The calls to ``train``, in order, of a tune whose changes with a word of ``gains`` gain (``tried``:
    each call's run.json ``tries``, in the same order)."""
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

    def train(cfg: RunConfig, opts: Any, what: str, tries: dict[str, Any]) -> Path:
        calls.append(what)
        if tried is not None:
            tried.append(tries)
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


def test_each_run_of_advice_records_what_it_tries_against_the_run_it_was_advised_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run.json's ``tries``: the analysis sets the change's predicted and measured speedup beside the
    waterfall term its cause is part of; the baseline and the default runs try nothing."""
    tried: list[dict[str, Any]] = []
    calls = _fake_tune(tmp_path, monkeypatch, gains=("metrics",), tried=tried)
    default_run = f"2-{calls[1]}"
    for what, t in zip(calls, tried, strict=True):
        if what in ("baseline", "default"):
            assert t == {}, (what, t)
            continue
        assert t["run_id"] == default_run and len(t["kinds"]) == 1 and t["predicted_speedup"] == pytest.approx(1.1)
        assert (t["predicted_lo"], t["predicted_hi"]) == pytest.approx((1.0, 1.2))
    assert {t["kinds"][0] for t in tried if t} == {"metric_reductions", "framework", "gradient_allreduce"}
