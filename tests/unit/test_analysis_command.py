"""Runs whose launched command recorded no steps: analysed for what they have (the whole command's wall time
and speedup, CPU and memory per worker and host, exit status), their step figures null with the reason."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from perfkit.analysis import renderers
from perfkit.analysis.analyze import Analysis, analyze
from perfkit.analysis.command import NO_STEPS
from perfkit.analysis.renderers import RenderOptions
from perfkit.analysis.renderers import json as report_json
from tests.unit._analysis_runs import (
    COMMAND,
    set_meta,
    single_run,
    stepless_run,
    write_run,
)

SINGLE, MULTI = "20260101T000000Z-single", "20260101T010000Z-multi"


@pytest.fixture
def pair(tmp_path: Path) -> Analysis:
    """The same command once in single mode (8 s at one core) and on 2 workers (5 s, each at 90%)."""
    stepless_run(tmp_path, SINGLE, mode="single", workers=1, wall_s=8.0, cpu=100.0)
    stepless_run(tmp_path, MULTI, workers=2, wall_s=5.0, cpu=90.0, started="2026-01-01T01:00:00.000Z")
    return analyze(None, tmp_path)


def test_two_runs_without_steps_give_the_command_speedup(pair: Analysis) -> None:
    assert pair.excluded.empty, "a run without steps is analysed, not left out"
    assert pair.baseline_id == SINGLE
    runs = pair.runs.set_index("run_id")
    assert runs.loc[SINGLE, "command_wall_s"] == pytest.approx(8.0)
    assert runs.loc[MULTI, "command_wall_s"] == pytest.approx(5.0)
    assert runs.loc[MULTI, "command_speedup"] == pytest.approx(1.6)
    assert runs.loc[SINGLE, "command_speedup"] == pytest.approx(1.0)
    # CPU-seconds over the command's whole life: 10 samples of 0.5 s per worker
    assert runs.loc[MULTI, "command_cpu_s"] == pytest.approx(2 * 10 * 0.5 * 0.9)
    for col in ("steady_epoch_s", "fit_s", "speedup", "efficiency", "cpu_s_per_1k_samples", "equal_epoch_s"):
        assert math.isnan(runs.loc[MULTI, col]), col
    assert runs.loc[MULTI, "steps_note"] == NO_STEPS and runs.loc[MULTI, "split_note"] == NO_STEPS
    assert runs.loc[MULTI, "split_source"] is None and runs.loc[MULTI, "strategy"] is None


def test_cpu_and_memory_per_worker_and_host_over_the_whole_command(pair: Analysis) -> None:
    w = pair.workers[pair.workers["run_id"] == MULTI].set_index("worker")
    assert list(w.index) == [0, 1]
    assert (w["cpu_mean"] == 90.0).all() and (w["cpu_p95"] == 90.0).all()
    assert w["cpu_s"].tolist() == pytest.approx([4.5, 4.5])
    assert w["rss_peak_bytes"].tolist() == [100 * 2**20, 150 * 2**20] and (w["exit_code"] == 0).all()
    h = pair.hosts[pair.hosts["run_id"] == MULTI].iloc[0]
    assert h["workers"] == 2 and h["cpu_mean"] == pytest.approx(180.0) and h["budget_share_mean"] == pytest.approx(0.9)
    assert pair.runs.set_index("run_id").loc[MULTI, "rss_peak_max_bytes"] == 150 * 2**20
    procs = pair.processes[pair.processes["run_id"] == MULTI]
    assert set(procs["role"]) == {"worker", "launcher"} and (procs["samples"] == 10).all()


def test_the_verdict_opens_with_the_command_speedup_and_says_why_there_are_no_steps(pair: Analysis) -> None:
    first, second = pair.verdict[:2]
    assert first == (f"{MULTI} (multi, 2 workers) ran the whole command 1.60x faster than the baseline {SINGLE} "
                     f"(single): command speedup 1.60x (5 s vs 8 s, wall time from the workers' start to the last "
                     f"one's exit).")
    assert second == (f"No steps in {SINGLE}, {MULTI}: {NO_STEPS}; epoch time, throughput, step split, stragglers "
                      f"and the what-ifs are not computed for them.")
    text = "\n".join(pair.verdict)
    assert "No run could be analysed" not in text and "no epoch time was recorded" not in text
    assert (f"{MULTI} over the whole command: 9 CPU-seconds of its worker processes vs 8 for the baseline (1.12x); "
            f"each worker process used 90% CPU on average (100% = one core); peak RSS 150 MiB.") in text
    assert "Host CPU against its budget (mean): localhost 180% of 200% (90%)." in text


def test_json_csv_and_console_carry_the_command_figures(pair: Analysis) -> None:
    doc = json.loads(_rendered("json", pair))
    assert doc["excluded"] == []
    multi = next(r for r in doc["runs"] if r["run_id"] == MULTI)
    assert set(multi) == set(report_json.KEYS["runs"])
    assert multi["command_wall_s"] == 5.0 and multi["command_speedup"] == pytest.approx(1.6)
    assert multi["steps_note"] == NO_STEPS and multi["steady_epoch_s"] is None and multi["speedup"] is None
    for section in ("workers", "hosts", "processes"):
        assert all(set(r) <= set(report_json.KEYS[section]) for r in doc[section]), section
    assert {r["exit_code"] for r in doc["workers"]} == {0}
    markdown = report_json.keys_markdown()
    for key in ("command_wall_s", "command_speedup", "command_cpu_s", "steps_note", "exit_code"):
        assert f"- `{key}`: " in markdown
    csv = pd.read_csv(io.StringIO(_rendered("csv", pair)))
    assert csv["command_speedup"].tolist() == pytest.approx([1.0, 1.6])
    console = _rendered("console", pair)
    assert "runs: the whole command" in console and f"workers of {MULTI} (whole command, no steps)" in console
    assert "runs: speed" not in console, "every run is without steps: no table of step figures"


def test_a_stepped_baseline_and_a_run_without_steps_compare_on_the_whole_command(tmp_path: Path) -> None:
    base = single_run(tmp_path, SINGLE)  # the same command, recorded with perfkit.record
    text = " ".join(COMMAND)
    set_meta(base, preset=None, started="2026-01-01T00:00:00.000Z", ended="2026-01-01T00:00:12.500Z",
             workload={"spec": "command", "name": "command", "version": "", "params": {"command": text}},
             launch={"command": list(COMMAND), "recorded": True})
    stepless_run(tmp_path, MULTI, wall_s=5.0, started="2026-01-01T01:00:00.000Z")
    a = analyze(None, tmp_path)
    assert a.baseline_id == SINGLE and a.excluded.empty
    runs = a.runs.set_index("run_id")
    assert runs.loc[SINGLE, "command_wall_s"] == pytest.approx(12.5), "a stepped run's: run.json's start to end"
    assert runs.loc[MULTI, "command_speedup"] == pytest.approx(2.5) and math.isnan(runs.loc[MULTI, "speedup"])
    assert runs.loc[SINGLE, "steady_epoch_s"] > 0 and pd.isna(runs.loc[SINGLE, "steps_note"])
    assert a.verdict[0].startswith(f"{MULTI} (multi, 2 workers) ran the whole command 2.50x faster than the "
                                   f"baseline {SINGLE} (single): command speedup 2.50x (5 s vs 12.5 s")
    assert a.verdict[1].startswith(f"No steps in {MULTI}: {NO_STEPS}") and a.verdict[1].endswith("for it.")
    assert a.verdict[2].startswith(f"Baseline: {SINGLE} (single, ") and "steady epoch" in a.verdict[2]


def test_stepped_runs_get_the_command_wall_time_too_and_parts_span_all_hosts(tmp_path: Path) -> None:
    base = single_run(tmp_path, SINGLE)
    set_meta(base, started="2026-01-01T00:00:00.000Z", ended="2026-01-01T00:00:40.000Z")
    parts = write_run(tmp_path, MULTI, parts=True, started="2026-01-01T01:00:00.000Z")
    set_meta(parts[0], started="2026-01-01T01:00:01.000Z", ended="2026-01-01T01:00:20.000Z")
    set_meta(parts[1], started="2026-01-01T01:00:00.500Z", ended="2026-01-01T01:00:19.000Z")
    a = analyze(None, tmp_path)
    runs = a.runs.set_index("run_id")
    assert runs.loc[MULTI, "command_wall_s"] == pytest.approx(19.5), "the earliest part's start to the latest end"
    assert runs.loc[MULTI, "command_speedup"] == pytest.approx(40 / 19.5)
    assert pd.isna(runs.loc[MULTI, "steps_note"]) and runs.loc[MULTI, "speedup"] > 0
    assert not any("whole command" in line for line in a.verdict), "stepped pairs keep their own verdict"


def test_without_times_there_is_no_command_wall_time(tmp_path: Path) -> None:
    write_run(tmp_path, MULTI)  # the fixture's started == ended
    assert math.isnan(analyze(None, tmp_path).runs["command_wall_s"].iloc[0])


def test_a_run_without_steps_is_left_out_only_for_what_would_leave_out_any_run(tmp_path: Path) -> None:
    stepless_run(tmp_path, SINGLE, mode="single", workers=1)
    stepless_run(tmp_path, MULTI, status="failed", exit_code=1, started="2026-01-01T01:00:00.000Z")
    a = analyze(None, tmp_path)
    assert a.excluded.set_index("run_id").loc[MULTI, "reason"] == "status failed: boom"
    assert a.runs["run_id"].tolist() == [SINGLE]
    assert a.verdict[0] == (f"No steps in {SINGLE}: {NO_STEPS}; epoch time, throughput, step split, stragglers and "
                            f"the what-ifs are not computed for it.")


def test_a_worker_the_sampler_never_saw_keeps_null_cpu_and_is_warned_about(tmp_path: Path) -> None:
    stepless_run(tmp_path, SINGLE, mode="single", workers=1)
    stepless_run(tmp_path, MULTI, sampled=(0,), started="2026-01-01T01:00:00.000Z")
    a = analyze(None, tmp_path)
    w = a.workers[a.workers["run_id"] == MULTI].set_index("worker")
    assert w.loc[0, "cpu_mean"] == 100.0 and math.isnan(w.loc[1, "cpu_mean"]) and w.loc[1, "exit_code"] == 0
    assert a.hosts.empty or MULTI not in set(a.hosts["run_id"]), "a host sum without a worker would be partial"
    assert f"{MULTI}: no CPU samples of worker(s) 1: CPU cost and per-host CPU are left out" in a.warnings
    assert a.runs.set_index("run_id").loc[MULTI, "command_speedup"] == pytest.approx(1.0)


def test_a_run_without_steps_on_another_command_is_not_compared(tmp_path: Path) -> None:
    stepless_run(tmp_path, SINGLE, mode="single", workers=1)
    stepless_run(tmp_path, MULTI, command=("sleep", "5"), started="2026-01-01T01:00:00.000Z")
    a = analyze(None, tmp_path)
    assert a.baseline_id is None and "no complete single-mode run" in a.baseline_note
    assert a.runs["run_id"].tolist() == [MULTI]
    assert a.verdict[0] == (f"{MULTI} (multi, 2 workers) ran the whole command in 5 s (wall time from the workers' "
                            f"start to the last one's exit); no baseline ({a.baseline_note}), so no speedup.")


def test_the_html_report_plots_the_command_speedup(pair: Analysis) -> None:
    from perfkit.analysis.renderers.html import charts, short_names

    names = short_names(pair.runs["run_id"].tolist())
    figures = dict(charts(pair, names))
    speed = figures["Speedup and scaling efficiency"]
    assert speed["data"][1]["name"] == "command speedup (whole command)"
    assert speed["data"][1]["y"] == pytest.approx([1.0, 1.6])
    cpu = figures[f"CPU% per process over time: {MULTI}"]
    assert cpu["layout"]["xaxis"]["title"]["text"] == "seconds since the first CPU sample (no steps)"
    assert "No steps recorded" in figures["Step time per worker"]
    assert [d["name"] for d in figures["Memory per worker (peak RSS)"]["data"]] == ["single", "multi"]


def _rendered(fmt: str, a: Analysis) -> str:
    buf = io.StringIO()
    renderers.render(fmt, a, buf, RenderOptions(width=200))
    return buf.getvalue()
