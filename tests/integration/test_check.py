"""``perfkit check overhead`` run as a user runs it: three arms, each in its own process, and its figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration._util import perfkit

pytestmark = pytest.mark.integration

SMALL = ("--preset", "tiny", "--epochs", "2", "--train-players", "1024", "--test-players", "256")


def test_check_overhead_times_bare_untraced_and_traced_runs_of_one_round(tmp_path: Path) -> None:
    proc = perfkit("check", "overhead", *SMALL, "--repeats", "1", "--results-dir", str(tmp_path), timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [written] = (tmp_path / "check").glob("overhead-*.json")
    data = json.loads(written.read_text())
    runs = data["runs"]
    assert [r["arm"] for r in runs] == ["bare", "untraced", "traced"], runs
    assert all(r["error"] is None and r["epochs"] == 2 and r["steady_epoch_s"] > 0 for r in runs), runs
    profile = {r["arm"]: json.loads((Path(r["run_dir"]) / "run.json").read_text())["config"]["profile_steps"]
               for r in runs if r["arm"] != "bare"}
    assert profile["untraced"] == "off" and profile["traced"] not in ("off", None), profile
    summary = {s["arm"]: s for s in data["summary"]}
    for arm in ("untraced", "traced"):
        assert summary[arm]["n"] == 1 and summary[arm]["ratio"] == pytest.approx(
            runs[["bare", "untraced", "traced"].index(arm)]["steady_epoch_s"] / runs[0]["steady_epoch_s"])
    said = " ".join(proc.stdout.split())
    assert "recording steps and CPU: " in said and "median of 1 rounds" in said and str(written) in said
    # the bare arm trained the same cached table perfkit's runs read: one dataset file, not two
    assert len(list((tmp_path / "datasets").glob("*.parquet"))) == 1
