"""The healthy-runs benchmark's own arithmetic (benchmarks/healthy.py): the script's marks and the summary
that counts false failures. No runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.article_multi_script import FIT_BEGAN_MARK, LAST_STEP_MARK
from benchmarks.healthy import Launch, fit_s, summarise


def test_a_workers_fit_is_timed_by_the_scripts_own_marks(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text(f"TF chatter\n{FIT_BEGAN_MARK}1000.000\ntrained\n{LAST_STEP_MARK}1035.250\n")
    assert fit_s(log) == pytest.approx(35.25)
    log.write_text("a script that printed no marks\n")
    assert fit_s(log) is None and fit_s(tmp_path / "missing.log") is None


def test_the_summary_counts_every_launch_that_did_not_end_complete() -> None:
    ok = Launch("article-4w", True, 0, "complete", 60.0, "", [9.7, 9.7], [35.0, 36.0])
    bad = Launch("article-4w", False, 1, "failed", 40.0, "hung", [None, None], [None, None])
    s = summarise([ok, bad, ok])["article-4w"]
    assert s["n"] == 3 and s["failed"] == 1
    assert s["teardown_s"]["n"] == 4 and s["fit_to_exit_s"]["median"] == pytest.approx(45.2)
