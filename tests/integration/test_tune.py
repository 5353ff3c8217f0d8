"""`perfkit tune` end to end on a tiny 2-worker configuration: the baseline, the default, the top piece of
advice tried; a table of predicted against measured, its JSON, and the tuned run's verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration._util import meta, perfkit

pytestmark = pytest.mark.integration


def test_tune_tries_the_top_advice_and_reports_predicted_against_measured(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = perfkit("tune", "--preset", "tiny", "--workers", "2", "--try", "1", "--results-dir", str(results),
                   "--quiet", timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "1. the single-machine baseline" in out and "advice tried" in out and "Verdict" in out
    [table] = (results / "tune").glob("tune-*.json")
    doc = json.loads(table.read_text())
    changes = [row["change"] for row in doc["tried"]]
    assert changes[0] == "default" and len(changes) == 2 and changes[1].startswith("--"), changes
    tried = doc["tried"][1]
    assert tried["runs"] == 1 and tried["predicted_speedup"] > 1 and tried["measured_speedup"] > 0
    run = results / tried["run_ids"]
    knobs = meta(run)["config"]["knobs"]
    flag, value = changes[1].split(" ")
    assert str(knobs[flag.lstrip("-").replace("-", "_")]) == value, knobs  # what was tried is what ran
    assert f"tuned: {doc['tuned']}" in out and (results / doc["tuned"] / "run.json").is_file()
