"""The speedup waterfall (analysis/waterfall.py) on hand-built runs whose every part is known: the terms sum
exactly to the measured gap, each is the run's part less the baseline's over the ideal, the ideal is the
compute given, and the verdict, terminal, JSON and HTML carry it."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from perfkit.analysis.analyze import analyze
from perfkit.analysis.renderers import console, html
from perfkit.analysis.renderers import json as report_json
from perfkit.analysis.waterfall import Term
from tests.unit._analysis_runs import single_run, typed, write_run

# The multi run: hosts a (3 cores, 3 workers at 0.2 s busy) and b (1 core, 1 worker at 0.5 s), input 0.05 s,
# transfer 0.1 s: every step 0.65 s, 64 samples; 10 steps and 1 s of validation an epoch. Per step, mean over
# the workers: busy 0.275 (compute 0.75 of it, framework 0.25), input 0.05, transfer 0.1, wait 0.225.
PER_1K = 1000 / 64  # seconds per step -> seconds per 1,000 samples
EPOCH_1K = 1000 / 640


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    single_run(tmp_path, "20260101T000000Z-single")  # 2 cores, busy 1.0 + input 0.05 a step, no trace
    write_run(tmp_path, "20260101T000100Z-multi")
    return tmp_path


def _terms(a, run_id: str) -> dict[str, dict]:
    w = a.waterfall[(a.waterfall["run_id"] == run_id) & (a.waterfall["level"] == "steady")]
    return {r["term"]: r for r in w.to_dict("records")}


def test_each_term_is_the_runs_part_less_the_baselines_over_the_ideal_and_they_sum_to_the_gap(runs: Path) -> None:
    a = analyze(None, runs, "20260101T000000Z-single")
    row = a.runs.set_index("run_id").loc["20260101T000100Z-multi"]
    assert row["wf_cores"] == 4.0 and row["ideal_speedup"] == pytest.approx(2.0)  # 3 + 1 cores against 2
    t = _terms(a, "20260101T000100Z-multi")
    ideal_s = (10 * 1.05 + 1.0) * EPOCH_1K / 2  # the baseline's steady epoch per 1,000 samples, over the ideal
    measured_s = (10 * 0.65 + 1.0) * EPOCH_1K
    # A baseline without a split is its steps as compute: the run's framework and input are counted there too.
    assert t["compute"]["run_s"] == pytest.approx((0.275 + 0.05) * PER_1K)
    assert t["compute"]["lost_s"] == pytest.approx((0.275 + 0.05) * PER_1K - 10 * 1.05 * EPOCH_1K / 2)
    assert t["allreduce"]["lost_s"] == pytest.approx(0.1 * PER_1K)
    assert t["wait"]["lost_s"] == pytest.approx(0.225 * PER_1K)
    assert t["outside_steps"]["lost_s"] == pytest.approx(1.0 * EPOCH_1K - 1.0 * EPOCH_1K / 2)
    assert t["cpu_contention"]["lost_s"] == 0.0 and t["trace_window"]["lost_s"] == 0.0
    assert "framework" not in t and "input" not in t
    assert sum(r["lost_s"] for r in t.values()) == pytest.approx(measured_s - ideal_s)
    assert t["not_explained"]["lost_s"] == pytest.approx(0.0, abs=1e-9)
    w = a.waterfall[(a.waterfall["run_id"] == "20260101T000100Z-multi") & (a.waterfall["level"] == "steady")]
    assert list(w["term"])[-1] == Term.UNEXPLAINED.value and list(w["order"]) == list(range(len(w)))
    lost = w["lost_s"].iloc[:-1].tolist()
    assert lost == sorted(lost, reverse=True), "largest loss first"
    assert w["share"].sum() == pytest.approx(1.0)
    assert w["speedup_after"].iloc[-1] == pytest.approx(row["speedup"]) == pytest.approx(11.5 / 7.5)
    assert w["speedup_lost"].sum() == pytest.approx(2.0 - 11.5 / 7.5)


def test_a_traced_baseline_keeps_framework_and_input_apart(tmp_path: Path) -> None:
    base = write_run(tmp_path, "20260101T000000Z-single", mode="single", hosts=(("vm", 2.0, 1),), busy={0: 1.0},
                     transfer=0.0, cpu={0: 150.0}, trace=True)[0]
    assert base.exists()
    write_run(tmp_path, "20260101T000100Z-multi")
    a = analyze(None, tmp_path, "20260101T000000Z-single")
    t = _terms(a, "20260101T000100Z-multi")
    assert t["framework"]["lost_s"] == pytest.approx(0.25 * 0.275 * PER_1K - 0.25 * 1.0 * PER_1K / 2)
    assert t["compute"]["lost_s"] == pytest.approx(0.75 * 0.275 * PER_1K - 0.75 * 1.0 * PER_1K / 2)
    assert t["input"]["lost_s"] == pytest.approx(0.05 * PER_1K - 0.05 * PER_1K / 2)
    assert t["not_explained"]["lost_s"] == pytest.approx(0.0, abs=1e-9)


def test_workers_on_the_baselines_own_cores_have_an_ideal_of_one(tmp_path: Path) -> None:
    single_run(tmp_path, "20260101T000000Z-single")
    write_run(tmp_path, "20260101T000100Z-multi", hosts=(("vm", 2.0, 4),), busy=dict.fromkeys(range(4), 0.3))
    a = analyze(None, tmp_path, "20260101T000000Z-single")
    assert a.runs.set_index("run_id").loc["20260101T000100Z-multi", "ideal_speedup"] == pytest.approx(1.0)


def test_a_ps_run_and_a_run_without_a_baseline_have_none(tmp_path: Path) -> None:
    single_run(tmp_path, "20260101T000000Z-single")
    write_run(tmp_path, "20260101T000100Z-ps", mode="ps")
    a = analyze(None, tmp_path, "20260101T000000Z-single")
    assert a.waterfall.empty
    write_run(tmp_path / "alone", "20260101T000200Z-multi")
    assert analyze(None, tmp_path / "alone").waterfall.empty


def test_the_verdict_terminal_json_and_html_carry_it(runs: Path) -> None:
    a = analyze(None, runs, "20260101T000000Z-single")
    [line] = [v for v in a.verdict if v.startswith("Where the speedup went")]
    assert "of the 2.00x that its compute could give (4 cores against the baseline's 2)" in line
    assert "waiting for the slowest worker took" in line and "1.53x measured" in line
    out = io.StringIO()
    console.render(a, out, console.RenderOptions(width=140))
    assert "where the speedup went: 20260101T000100Z-multi" in out.getvalue()
    data = json.loads(_json(a))
    rows = data["waterfall"]
    assert {r["term"] for r in rows} == {"compute", "allreduce", "wait", "outside_steps", "trace_window",
                                         "cpu_contention", "restart", "not_explained"}
    assert math.isclose(sum(r["lost_s"] for r in rows), (7.5 - 11.5 / 2) * EPOCH_1K, rel_tol=1e-9)
    assert set(rows[0]) == set(report_json.KEYS["waterfall"])
    assert "Where the speedup went: 20260101T000100Z-multi" in html.page(a)


def _json(a) -> str:
    out = io.StringIO()
    report_json.render(a, out)
    return out.getvalue()


def test_the_wait_term_says_what_the_equal_workers_run_predicted_and_measured(runs: Path) -> None:
    from tests.unit._analysis_runs import set_meta

    [check] = write_run(runs, "20260101T000200Z-multi-verify", busy=dict.fromkeys(range(4), 0.2))  # 4.5 s epochs
    set_meta(check, verifies={"run_id": "20260101T000100Z-multi", "what": "equal workers",
                              "predicted_epoch_s": 3.9, "predicted_lo_s": 3.9, "predicted_hi_s": 3.9})
    a = analyze(None, runs, "20260101T000000Z-single")
    t = _terms(a, "20260101T000100Z-multi")
    assert t["wait"]["checked_by"] == check.name
    assert t["wait"]["predicted_speedup"] == pytest.approx(11.5 / 3.9)
    assert t["wait"]["measured_speedup"] == pytest.approx(11.5 / 4.5)
    assert not isinstance(t["compute"]["checked_by"], str)
    line = next(v for v in a.verdict if v.startswith("Where the speedup went"))  # the multi run's, first
    assert f"(checked by {check.name}: 2.95x predicted, 2.56x measured)" in line


def test_a_tune_run_of_advice_checks_the_term_its_cause_is_part_of(runs: Path) -> None:
    """``perfkit tune``'s run of --metrics minimal (run.json ``tries``) beside the advised run's all-reduce:
    the speedup predicted (the advised run's x the advice's) and the one measured; a combination of two
    changes checks no term."""
    from tests.unit._analysis_runs import set_meta

    advised = "20260101T000100Z-multi"
    [tried] = write_run(runs, "20260101T000300Z-multi-tune", busy=dict.fromkeys(range(4), 0.2))  # 4.5 s epochs
    set_meta(tried, tries={"run_id": advised, "kinds": ["metric_reductions"], "predicted_speedup": 1.25,
                           "predicted_lo": 1.1, "predicted_hi": 1.4})
    [both] = write_run(runs, "20260101T000400Z-multi-tune", busy=dict.fromkeys(range(4), 0.2))
    set_meta(both, tries={"run_id": advised, "kinds": ["metric_reductions", "framework"], "predicted_speedup": 1.5})
    a = analyze(None, runs, "20260101T000000Z-single")
    t = _terms(a, advised)
    speedup = a.runs.set_index("run_id")["speedup"]
    assert t["allreduce"]["checked_by"] == tried.name
    assert t["allreduce"]["predicted_speedup"] == pytest.approx(speedup[advised] * 1.25)
    assert t["allreduce"]["measured_speedup"] == pytest.approx(speedup[tried.name])
    assert not any(isinstance(r["checked_by"], str) for name, r in t.items() if name != "allreduce")
    line = next(v for v in a.verdict if v.startswith("Where the speedup went"))
    assert f"checked by {tried.name}" in line and both.name not in line


def _record(traced_s: list[float], val_s: list[float]) -> tuple[Any, Any, pd.DataFrame]:
    """Two workers, three epochs of 8 steps of 64 samples each; the second epoch's steps 2-7 traced (a window
    that ends its epoch) at ``traced_s``, every other step 0.3 s; ``val_s``: each epoch's validation."""
    from perfkit.analysis.stragglers import StepSplit
    from perfkit.results import RunRecord

    steps, epochs, traced = [], [], []
    for w in (0, 1):
        for e in range(3):
            times = [0.3, 0.3, *traced_s] if e == 1 else [0.3] * 8
            steps += [{"worker": w, "epoch": e, "step": s, "duration_s": d, "samples": 64} for s, d in enumerate(times)]
            epochs.append({"worker": w, "epoch": e, "val_s": val_s[e]})
        traced += [{"worker": w, "epoch": 1, "step": s, "step_s": d, "busy_s": d, "transfer_s": 0.0, "wait_s": 0.0,
                    "input_s": 0.0} for s, d in enumerate(traced_s, start=2)]
    record = RunRecord(Path("."), typed({}), pd.DataFrame(steps), pd.DataFrame(epochs), pd.DataFrame(), pd.DataFrame())
    table = pd.DataFrame({"epoch": [1, 2, 3], "samples": [1024] * 3,
                          "epoch_s": [8 * 0.3 + val_s[0], 2 * 0.3 + sum(traced_s) + val_s[1], 8 * 0.3 + val_s[2]]})
    return record, StepSplit("trace", pd.DataFrame(traced), 2), table


def test_a_traced_steps_spike_and_the_captures_stop_are_counted_once() -> None:
    """The window's extra is its traced steps over the untraced pace, the capture's stop the validation after
    it over the others': the split is taken at that pace, so a slow traced step is the window's alone (not
    also the split's mean, as a median-over-median factor left it), and the stop is not also outside the steps."""
    from perfkit.analysis.overheads import window_cost
    from perfkit.analysis.waterfall import STEPS
    from perfkit.analysis.waterfall_parts import run_parts

    traced_s = [0.33, 0.33, 0.33, 0.63, 0.33, 0.33]
    record, split, epochs = _record(traced_s, [1.0, 1.5, 1.0])
    window = window_cost(split, record)
    assert window is not None and window.stop_s == pytest.approx(0.5)
    assert window.extra_s == pytest.approx(sum(traced_s) - 6 * 0.3 + 0.5) and window.pace_s == pytest.approx(0.3 / 64)
    parts = run_parts(record, epochs, split, None, window, None)
    per_1k = 1000 / 2048  # two steady epochs of 1,024 samples
    assert parts[Term.TRACE.column] == pytest.approx((sum(traced_s) - 1.8 + 0.5) * per_1k)
    assert parts[Term.OUTSIDE.column] == pytest.approx((1.5 + 1.0 - 0.5) * per_1k)
    assert parts[Term.COMPUTE.column] == pytest.approx(16 * 0.3 * per_1k)  # every steady step at 0.3 s
    split_s = sum(parts[t.column] for t in (Term.COMPUTE, Term.ALLREDUCE, Term.WAIT, Term.INPUT, Term.CONTENTION))
    assert parts[STEPS] == pytest.approx(split_s + parts[Term.TRACE.column] - 0.5 * per_1k)


def test_traced_steps_no_slower_than_the_untraced_keep_their_own_pace() -> None:
    """A window that cost nothing measurable (its steps quicker than the untraced, as a loaded machine can
    make them) has no profiler's cost to take out: its epoch keeps the traced steps' own pace (what its
    untraced steps took beyond it is not explained), the next epoch its own."""
    from perfkit.analysis.overheads import window_cost
    from perfkit.analysis.waterfall_parts import run_parts

    record, split, epochs = _record([0.25] * 6, [1.0, 1.0, 1.0])
    window = window_cost(split, record)
    assert window is not None and window.extra_s < 0
    parts = run_parts(record, epochs, split, None, window, None)
    assert parts[Term.TRACE.column] == 0.0
    assert parts[Term.COMPUTE.column] == pytest.approx((8 * 0.25 + 8 * 0.3) * 1000 / 2048)


def test_each_steady_epoch_is_taken_at_its_own_pace() -> None:
    """A machine whose load drifts between epochs: the split (measured in the window's epoch) is taken to
    each steady epoch at that epoch's untraced pace, so a slower later epoch is no part of "not explained"."""
    from perfkit.analysis.overheads import window_cost
    from perfkit.analysis.waterfall import STEPS
    from perfkit.analysis.waterfall_parts import run_parts

    traced_s = [0.33] * 6
    record, split, epochs = _record(traced_s, [1.0, 1.0, 1.0])
    steps = record.steps.assign(duration_s=record.steps["duration_s"].where(record.steps["epoch"] != 2, 0.36))
    record = type(record)(record.path, record.run, steps, record.epochs, record.cpu, record.system)
    epochs.loc[2, "epoch_s"] = 8 * 0.36 + 1.0
    parts = run_parts(record, epochs, split, None, window_cost(split, record), None)
    per_1k = 1000 / 2048
    assert parts[Term.COMPUTE.column] == pytest.approx((8 * 0.3 + 8 * 0.36) * per_1k)
    assert parts[STEPS] == pytest.approx(parts[Term.COMPUTE.column] + parts[Term.TRACE.column])


def test_a_restarts_first_step_is_its_own_term_and_a_lost_attempt_is_no_part_of_the_steady_epoch() -> None:
    """A restart in the window's epoch: the lost attempt's steps are not in the steady epoch (its time is the
    final attempt's), the restarted attempt's first step over the untraced pace is the restart term (and no
    measure of that pace), and the steps' account still adds up."""
    from perfkit.analysis.overheads import window_cost
    from perfkit.analysis.summary import recompiled
    from perfkit.analysis.waterfall import STEPS
    from perfkit.analysis.waterfall_parts import run_parts

    traced_s = [0.33] * 6
    record, split, epochs = _record(traced_s, [1.0, 1.0, 1.0])
    steps = record.steps.assign(attempt=(record.steps["epoch"] > 0).astype(int))
    first = (steps["epoch"] == 1) & (steps["step"] == 0)
    steps.loc[first, "duration_s"] = 2.3  # compiled again, the workers rejoining: 2.0 s over the pace
    lost = steps[(steps["epoch"] == 1) & (steps["step"] < 4)].assign(attempt=0, duration_s=0.9)
    record = type(record)(record.path, record.run, pd.concat([steps, lost], ignore_index=True), record.epochs,
                          record.cpu, record.system)
    assert recompiled(record.steps).sum() == 2  # one a worker
    epochs.loc[1, "epoch_s"] += 2.0
    window = window_cost(split, record)
    assert window is not None and window.pace_s == pytest.approx(0.3 / 64)  # step 1 only: not the restart's
    parts = run_parts(record, epochs, split, None, window, None)
    per_1k = 1000 / 2048
    assert parts[STEPS] == pytest.approx((16 * 0.3 + 6 * 0.03 + 2.0) * per_1k)  # the final attempts' steps
    assert parts[Term.RESTART.column] == pytest.approx(2.0 * per_1k)
    split_s = sum(parts[t.column] for t in (Term.COMPUTE, Term.ALLREDUCE, Term.WAIT, Term.INPUT, Term.CONTENTION))
    assert parts[STEPS] == pytest.approx(split_s + parts[Term.TRACE.column] + parts[Term.RESTART.column])


def test_the_verdict_names_a_lone_small_term_and_counts_several() -> None:
    from types import SimpleNamespace

    from perfkit.analysis.account import waterfall_line

    def line(small: list[tuple[str, float]]) -> str:
        rows = [("wait", "waiting for the slowest worker", 0.5, 0.3)]
        rows += [(t, words, 0.01, lost) for t, (words, lost) in zip(("input", "restart"), small)]
        rows.append(("not_explained", "not explained", 0.0, 0.0))
        w = pd.DataFrame([{"run_id": "r", "level": "steady", "term": t, "words": words, "share": share,
                           "speedup_lost": lost} for t, words, share, lost in rows])
        return waterfall_line(SimpleNamespace(run_id="r", ideal_speedup=1.0, wf_cores=2.0, speedup=0.5), w)

    assert "waiting for the slowest worker took 0.30x, input took 0.01x; not explained" in line([("input", 0.01)])
    two = line([("input", 0.01), ("a restart's first step", 0.0)])
    assert "the other 2 terms together took 0.01x" in two and "input" not in two
