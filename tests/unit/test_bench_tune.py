"""python -m benchmarks tune's judgement of perfkit tune's tables (no training: tables as tune writes them)."""

from __future__ import annotations

from benchmarks._common import Report
from benchmarks.tune import table, verdicts


def _row(change: str, measured: float, predicted: float | None, vs: float, ids: str) -> dict[str, object]:
    return {"change": change, "runs": 2, "predicted_speedup": predicted, "measured_speedup": measured,
            "measured_lo": measured - 0.01, "measured_hi": measured + 0.01,
            "error": None if predicted is None else predicted / measured - 1, "vs_baseline": vs,
            "outcome": "gain", "run_ids": ids}


def test_the_tuned_two_workers_and_every_prediction_are_judged_against_their_targets() -> None:
    results = {"2w": {"tuned": "b2", "tried": [_row("default", 1.0, None, 0.98, "a1 a2"),
                                               _row("--metrics minimal", 1.15, 1.07, 1.13, "b1 b2"),
                                               _row("--steps-per-execution 8", 1.02, 1.20, 1.00, "c1 c2")]}}
    v = verdicts(results)
    assert v == {"predictions": 2, "within_error": 1, "2w tuned_vs_single": 1.13, "2w meets_target": True}
    report = Report("tune", {"preset": "quick", "repeats": 2})
    report.results = {**results, "verdicts": v}
    text = table(report)
    assert "| 2w | --metrics minimal | 2 | 1.07 | 1.15 (1.14–1.16) | -7% | 1.13 | gain |" in text
    assert "1 of 2 predictions within 10% of their run; 2 local workers tuned: 1.13x single (meets >= 1.05)." in text
