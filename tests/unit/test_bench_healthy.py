"""The healthy-runs benchmark's own arithmetic (perfkit/bench/healthy.py): the autotuner's passes, the
script's marks, the summary that counts false failures. No runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.bench.article_multi_script import FIT_BEGAN_MARK, LAST_STEP_MARK
from perfkit.bench.healthy import Launch, next_pass_s, predicted, summarise


def test_the_autotuners_passes_double_from_10_ms_to_a_minute() -> None:
    # passes at 10 ms x (2^k - 1) after it starts: ..., 10.23, 20.47, 40.95, 81.91 s, then every 60 s
    assert next_pass_s(10.0) == pytest.approx(0.23)
    assert next_pass_s(41.0) == pytest.approx(81.91 - 41.0)
    assert next_pass_s(82.0) == pytest.approx(141.91 - 82.0)
    assert next_pass_s(150.0) == pytest.approx(201.91 - 150.0)


def test_a_workers_predicted_wait_comes_from_when_fit_began_and_its_last_step(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text(f"TF chatter\n{FIT_BEGAN_MARK}1000.000\ntrained\n{LAST_STEP_MARK}1030.000\n")
    assert predicted(log) == pytest.approx(round(40.95 - 30.0, 2))
    log.write_text("a script that printed no marks\n")
    assert predicted(log) is None and predicted(tmp_path / "missing.log") is None


def test_the_summary_counts_every_launch_that_did_not_end_complete() -> None:
    ok = Launch("article-4w", True, 0, "complete", 60.0, "", [9.7, 9.7], [10.0, 10.0])
    bad = Launch("article-4w", False, 1, "failed", 40.0, "hung", [None, None], [None, None])
    s = summarise([ok, bad, ok])["article-4w"]
    assert s["n"] == 3 and s["failed"] == 1
    assert s["teardown_s"]["n"] == 4 and s["beyond_autotuner_s"]["median"] == pytest.approx(-0.3)
