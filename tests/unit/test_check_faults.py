"""``perfkit check faults``' choice of faults and its judgement of a trial's run, from run.json files written
here (the trials themselves: tests/integration/test_faults.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks._common import Report
from benchmarks.faults import table
from perfkit.errors import UsageError
from perfkit.studies.faults import FAULTS, Trial, chosen_faults, judge, summarise


def test_faults_are_checked_and_the_root_ones_refused_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="--faults: hang; choose from stop, sleep, lock, link, disk, kill"):
        chosen_faults("stop,hang")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UsageError, match="--faults: disk needs root"):
        chosen_faults("stop,disk")
    assert chosen_faults(None) == ["stop", "sleep", "lock", "kill"]
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert chosen_faults(" kill , stop ") == ["kill", "stop"] and set(chosen_faults(None)) <= set(FAULTS)
    monkeypatch.setattr("shutil.which", lambda name: None)  # no iproute2: the link cannot be cut
    with pytest.raises(UsageError, match="--faults: link needs iproute2's `ip`"):
        chosen_faults("link")
    assert chosen_faults(None) == ["stop", "sleep", "lock", "disk", "kill"]


def _run(tmp_path: Path, meta: dict) -> Path:
    run = tmp_path / "stop-0"
    (run / "workers" / "0").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps(meta))
    return run


def test_a_hang_is_named_right_only_when_the_stopped_worker_is_named_first(tmp_path: Path) -> None:
    right = judge("stop", _run(tmp_path / "a", {"status": "failed", "failure": {"hung": [1, 0]}}), True, 12.0, 1,
                  "perfkit: error: worker 1 (pid 9) is stopped\n")
    wrong = judge("stop", _run(tmp_path / "b", {"status": "failed", "failure": {"hung": [0, 1]}}), True, 12.0, 1, "")
    assert right.named and right.message == "perfkit: error: worker 1 (pid 9) is stopped" and right.steps_kept == 0
    assert not wrong.named


def test_a_killed_launcher_is_named_by_its_run_saying_so(tmp_path: Path) -> None:
    run = _run(tmp_path, {"status": "interrupted", "error": "the launcher was killed (SIGKILL)"})
    assert judge("kill", run, True, 3.0, -9, "").named


def test_the_summary_counts_each_fault_and_the_benchmark_tables_it() -> None:
    trials = [Trial("stop", True, 11.0, 1, True, "failed", "m", 40),
              Trial("stop", True, 13.0, 1, False, "failed", "m", None),
              Trial("kill", True, 2.0, -9, True, "interrupted", "m", 10)]
    s = summarise(trials)
    assert s["stop"] == {"n": 2, "named": 1, "injected": 2, "detect_s_median": 13.0, "detect_s_max": 13.0, "kept": 1}
    report = Report("faults", {"repeats": 2})
    report.results = {"faults": s, "trials": [t.__dict__ for t in trials]}
    text = table(report)
    assert "| stop | 2 | 1/2 | 13.0 (max 13.0) | 1/2 |" in text and "Named right in 2 of 3 trials" in text


def test_the_stuck_script_the_lock_and_sleep_faults_launch_is_where_they_look() -> None:
    from perfkit.studies.faults import STUCK_SCRIPT

    assert STUCK_SCRIPT.is_file() and "GetStuck" in STUCK_SCRIPT.read_text()


@pytest.mark.parametrize(("args", "said"), [
    (["overhead", "--preset", "huge"], "--preset: unknown preset 'huge'; choose one of tiny, quick, blog"),
    (["overhead", "--epochs", "1"], "--epochs: 1; at least 2"),
    (["overhead", "--repeats", "0"], "--repeats: 0 is not a positive number of rounds"),
    (["faults", "--preset", "huge"], "--preset: unknown preset 'huge'"),
    (["faults", "--hang-timeout", "x"], "--hang-timeout: 'x' is not 'auto' or a number of seconds > 0"),
    (["faults", "--faults", "nope"], "--faults: nope; choose from stop, sleep, lock, link, disk, kill"),
    (["faults", "--repeats", "0"], "--repeats: 0 is not a positive number of trials"),
])
def test_a_bad_check_flag_is_one_line_and_starts_nothing(args: list[str], said: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.cli import main

    assert main(["check", *args, "--results-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not (tmp_path / "r").exists()
