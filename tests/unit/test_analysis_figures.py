"""Every figure of `perfkit analyze` on hand-built runs with known answers (see _analysis_runs)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perfkit.analysis.advice import CauseKind
from perfkit.analysis.analyze import Analysis, analyze
from perfkit.analysis.load import load_runs
from tests.unit._analysis_runs import S, single_run, typed, write_run

BASE, STRAG = "20260101T000000Z-single-base", "20260101T010000Z-multi-strag"


def _pair(tmp_path: Path, **kw: object) -> Analysis:
    """Baseline: 1 worker, step 1.05 s -> epoch 11.5 s. Straggler run: workers 0-2 compute 0.2 s on host a
    (3 cores), worker 3 0.5 s on host b (1 core); input 0.05, transfer 0.1 -> step 0.65 s, epoch 7.5 s."""
    single_run(tmp_path, BASE, started="2026-01-01T00:00:00Z")
    write_run(tmp_path, STRAG, started="2026-01-01T01:00:00Z", **kw)  # type: ignore[arg-type]
    return analyze(None, tmp_path)


def _run(a: Analysis, run_id: str = STRAG) -> pd.Series:
    return a.runs.set_index("run_id").loc[run_id]


def _workers(a: Analysis, run_id: str = STRAG) -> pd.DataFrame:
    return a.workers[a.workers["run_id"] == run_id].set_index("worker")


def test_epoch_fit_throughput_speedup_and_efficiency(tmp_path: Path) -> None:
    a = _pair(tmp_path)
    assert a.baseline_id == BASE and "latest complete single-mode run" in a.baseline_note
    base, run = _run(a, BASE), _run(a)
    assert base["steady_epoch_s"] == pytest.approx(11.5) and run["steady_epoch_s"] == pytest.approx(7.5)
    assert base["fit_s"] == pytest.approx(34.5) and run["fit_s"] == pytest.approx(22.5)
    assert run["steady_samples_per_s"] == pytest.approx(640 / 6.5)  # 10 steps x 64 samples in 6.5 s
    assert run["speedup"] == pytest.approx(11.5 / 7.5) and run["speedup_fit"] == pytest.approx(34.5 / 22.5)
    assert run["efficiency"] == pytest.approx(11.5 / 7.5 / 4)
    assert base["speedup"] == pytest.approx(1.0) and bool(base["is_baseline"])


def test_cpu_cost_per_process_per_host_and_budget_share(tmp_path: Path) -> None:
    a = _pair(tmp_path)
    run = _run(a)
    # 22.5 s window; workers at 100% each -> 4 x 22.5 CPU-s (launcher and the 999% samples after the end left out)
    assert run["cpu_s"] == pytest.approx(90.0, abs=1e-3)
    assert run["cpu_s_per_1k_samples"] == pytest.approx(90.0 / 1920 * 1000, rel=1e-4)
    assert run["cpu_cost_vs_baseline"] == pytest.approx(run["cpu_s_per_1k_samples"] / (34.5 * 1.5 / 1920 * 1000),
                                                        rel=1e-4)
    hosts = a.hosts[a.hosts["run_id"] == STRAG].set_index("host")
    assert hosts.loc["a", "cpu_mean"] == pytest.approx(300.0) and hosts.loc["a", "budget_cores"] == 3.0
    assert hosts.loc["a", "budget_share_mean"] == pytest.approx(1.0)
    assert hosts.loc["b", "workers"] == 1 and hosts.loc["b", "cpu_p95"] == pytest.approx(100.0)
    procs = a.processes[a.processes["run_id"] == STRAG]
    assert set(procs["role"]) == {"worker", "launcher"} and len(procs) == 5
    assert procs.set_index("worker").loc[-1, "cpu_mean"] == pytest.approx(1.0)


def test_memory_per_worker(tmp_path: Path) -> None:
    w = _workers(_pair(tmp_path))
    assert w["rss_peak_bytes"].tolist() == [(i + 2) * 100 * 2**20 for i in range(4)]
    assert w["steps"].tolist() == [30] * 4 and w["step_median_s"].tolist() == pytest.approx([0.65] * 4)


def test_trace_split_stragglers_and_what_if(tmp_path: Path) -> None:
    a = _pair(tmp_path)
    run, w = _run(a), _workers(a)
    assert run["split_source"] == "trace" and run["steps_compared"] == 30
    assert w["compute_s"].tolist() == pytest.approx([0.2, 0.2, 0.2, 0.5])  # compute_s + other_s
    assert w["transfer_s"].tolist() == pytest.approx([0.1] * 4)
    assert w["wait_s"].tolist() == pytest.approx([0.3, 0.3, 0.3, 0.0])
    assert w["input_s"].tolist() == pytest.approx([0.05] * 4)
    assert w["straggler_share"].tolist() == pytest.approx([0, 0, 0, 1])
    assert w["speed_score"].tolist() == pytest.approx([1, 1, 1, 0.4])
    assert w["flagged"].tolist() == [False, False, False, True]
    assert run["flagged_workers"] == "3" and run["slowest_worker"] == 3 and run["slowest_host"] == "b"
    assert run["straggler_cost"] == pytest.approx(3 * 0.3 / (4 * 0.65))
    assert run["others_wait_share"] == pytest.approx(0.3 / 0.65)
    # all at the median worker's speed: 0.2 compute + 0.1 transfer + 0.05 input instead of 0.65
    assert run["equal_step_ratio"] == pytest.approx(0.35 / 0.65)
    # The epoch: 10 steps x 0.35 s + validation, which waits for the slowest worker too: 1.0 s x 0.2 / 0.5.
    assert run["equal_val_s"] == pytest.approx(0.4) and run["equal_epoch_s"] == pytest.approx(3.5 + 0.4)
    assert run["equal_epoch_lo_s"] == pytest.approx(3.9) == run["equal_epoch_hi_s"]  # no step-to-step spread
    assert run["equal_transfer_source"] == "run" and "no calibration recorded" in run["equal_assumptions"]
    # Work per step from the workers held to one core: median of 1 x 0.2, 1 x 0.2, 1 x 0.2, 1 x 0.5 core-s;
    # / the median busy 0.2 s -> one core per worker.
    assert run["equal_budgets"] == "a=3, b=1"
    assert run["equal_speedup"] == pytest.approx(11.5 / run["equal_epoch_s"])


def test_placement_what_if_follows_measured_capacity(tmp_path: Path) -> None:
    a = _pair(tmp_path)
    run = _run(a)
    place = a.placement[a.placement["run_id"] == STRAG].set_index("host")
    # capacity a = 3 / 0.2 = 15 steps/s, b = 1 / 0.5 = 2: shares 15/17 and 2/17 of 4 workers
    assert place["workers_proportional"].tolist() == pytest.approx([4 * 15 / 17, 4 * 2 / 17])
    assert place["workers_now"].tolist() == [3, 1] and place["workers_proposed"].tolist() == [4, 0]
    assert run["placement_now"] == "3:1" and run["placement_proposed"] == "4:0" and run["placement_hosts"] == "a:b"
    assert run["compute_now_s"] == pytest.approx(0.5) and run["compute_proposed_s"] == pytest.approx(4 / 15)


def test_placement_keeps_a_placement_that_already_matches(tmp_path: Path) -> None:
    # a 4th worker on host a (4 x 0.3 / 3 = 0.4 s) would be slower than worker 3 on b (0.36 s): 3:1 is right
    single_run(tmp_path, BASE)
    write_run(tmp_path, STRAG, hosts=(("a", 3.0, 3), ("b", 1.0, 1)), busy={0: 0.3, 1: 0.3, 2: 0.3, 3: 0.36})
    a = analyze(None, tmp_path)
    assert _run(a)["placement_proposed"] == _run(a)["placement_now"] == "3:1"
    assert not _workers(a)["flagged"].any()


def test_estimates_without_a_trace_are_labelled(tmp_path: Path) -> None:
    # no trace: compute = CPU-seconds per step / core allowance (host cores / its workers: 1 core each)
    a = _pair(tmp_path, trace=False, cpu={0: 40.0, 1: 40.0, 2: 40.0, 3: 100.0})
    run, w = _run(a), _workers(a)
    assert run["split_source"] == "estimate" and "estimated from CPU-seconds" in run["split_note"]
    assert run["steps_compared"] == 20  # the steady epochs (after the first)
    assert w["compute_s"].tolist() == pytest.approx([0.26, 0.26, 0.26, 0.65])  # 0.4 x 0.65 s; 1.0 x 0.65 s
    assert w["input_s"].isna().all()  # not measured: folded into transfer, not made up
    assert w["speed_score"].tolist() == pytest.approx([1, 1, 1, 0.4])
    assert run["straggler_cost"] == pytest.approx(3 * 0.39 / (4 * 0.65))
    assert (w["split_source"] == "estimate").all()


def test_single_run_without_trace_has_no_split(tmp_path: Path) -> None:
    a = _pair(tmp_path)
    base = _run(a, BASE)
    assert pd.isna(base["split_source"]) and pd.isna(base["straggler_cost"])
    assert "no split" in base["split_note"]


def test_convergence_per_epoch_and_gap_at_the_last(tmp_path: Path) -> None:
    single_run(tmp_path, BASE, val_accuracy=(0.80, 0.85, 0.95))
    write_run(tmp_path, STRAG, val_accuracy=(0.70, 0.80, 0.90))
    a = analyze(None, tmp_path)
    ep = a.epochs[a.epochs["run_id"] == STRAG]
    assert ep["epoch"].tolist() == [1, 2, 3] and ep["val_accuracy"].tolist() == pytest.approx([0.7, 0.8, 0.9])
    assert ep["val_auc"].tolist() == pytest.approx([0.90, 0.92, 0.94])
    assert ep["end_s"].tolist() == pytest.approx([7.5, 15.0, 22.5])  # chart marks: seconds since the first step
    assert _run(a)["val_accuracy_gap"] == pytest.approx(-0.05)
    assert _run(a)["val_loss_gap"] == pytest.approx(0.0)


def test_two_host_parts_merge_on_the_wall_clock(tmp_path: Path) -> None:
    single_run(tmp_path, BASE)
    paths = write_run(tmp_path, STRAG, parts=True)  # host b's monotonic clock is 4000 s off host a's
    assert [p.name for p in paths] == [f"{STRAG}--a", f"{STRAG}--b"]
    run = load_runs([paths[1]], tmp_path).runs[0]  # naming one part brings its sibling
    assert run.run_id == STRAG and not run.problems and len(run.paths) == 2
    firsts = run.record.steps.groupby("worker")["t_start_ns"].min()
    assert (firsts.max() - firsts.min()) < 1_000_000  # lined up within 1 ms
    assert run.record.meta["clock"] == "wall" and sorted(run.record.meta["parts"]) == ["a", "b"]
    a = analyze(None, tmp_path)
    r = _run(a)
    assert r["fit_s"] == pytest.approx(22.5) and r["speedup"] == pytest.approx(11.5 / 7.5)
    assert r["slowest_worker"] == 3 and r["straggler_cost"] == pytest.approx(3 * 0.3 / (4 * 0.65))
    hosts = a.hosts[a.hosts["run_id"] == STRAG].set_index("host")
    assert hosts.loc["a", "cpu_mean"] == pytest.approx(300.0) and hosts.loc["b", "cpu_mean"] == pytest.approx(100.0)
    # the two launchers share a pid on different machines: still two processes
    launchers = a.processes[(a.processes["run_id"] == STRAG) & (a.processes["worker"] == -1)]
    assert len(launchers) == 2 and launchers["cpu_s"].tolist() == pytest.approx([0.225, 0.225], abs=1e-3)


def test_missing_part_is_left_out_naming_it(tmp_path: Path) -> None:
    import shutil

    single_run(tmp_path, BASE)
    paths = write_run(tmp_path, STRAG, parts=True)
    shutil.rmtree(paths[1])
    a = analyze(None, tmp_path)
    assert STRAG not in set(a.runs["run_id"])
    reason = a.excluded.set_index("run_id").loc[STRAG, "reason"]
    assert "worker(s) 3" in reason and f"{STRAG}--b" in reason


def test_baseline_is_the_latest_complete_single_run_on_the_same_workload(tmp_path: Path) -> None:
    single_run(tmp_path, "20260101T000000Z-single-old", started="2026-01-01T00:00:00Z")
    single_run(tmp_path, "20260101T020000Z-single-new", started="2026-01-01T02:00:00Z", busy=2.0)
    single_run(tmp_path, "20260101T030000Z-single-blog", started="2026-01-01T03:00:00Z", preset="blog")
    single_run(tmp_path, "20260101T040000Z-single-failed", started="2026-01-01T04:00:00Z", status="failed")
    write_run(tmp_path, STRAG, started="2026-01-01T01:00:00Z")
    a = analyze(None, tmp_path)
    assert a.baseline_id == "20260101T020000Z-single-new"
    assert _run(a)["speedup"] == pytest.approx(21.5 / 7.5)  # 10 x 2.05 + 1 s against 7.5 s
    # --baseline overrides
    b = analyze(None, tmp_path, "20260101T000000Z-single-old")
    assert b.baseline_id == "20260101T000000Z-single-old" and b.baseline_note == "named by --baseline"
    assert _run(b)["speedup"] == pytest.approx(11.5 / 7.5)


def test_baseline_outside_the_named_runs_is_found_in_the_results_dir(tmp_path: Path) -> None:
    single_run(tmp_path, BASE)
    [path] = write_run(tmp_path, STRAG)
    a = analyze([path], tmp_path)
    assert a.baseline_id == BASE and a.runs["run_id"].tolist() == [BASE, STRAG]


def test_no_baseline_means_no_speedup_not_a_made_up_one(tmp_path: Path) -> None:
    write_run(tmp_path, STRAG)
    a = analyze(None, tmp_path)
    assert a.baseline_id is None and "no complete single-mode run" in a.baseline_note
    assert a.runs["speedup"].isna().all() and a.runs["val_accuracy_gap"].isna().all()
    assert _run(a)["steady_epoch_s"] == pytest.approx(7.5)


def test_restarted_epochs_count_once(tmp_path: Path) -> None:
    single_run(tmp_path, BASE)
    [path] = write_run(tmp_path, STRAG)
    for w in range(4):  # a first attempt at epoch 0 that died: its rows must not count
        for name in ("steps", "epochs"):
            f = path / "workers" / str(w) / f"{name}.parquet"
            df = pd.read_parquet(f)
            first = df[df["epoch"] == 0].assign(attempt=0)
            if name == "steps":
                first = first.assign(t_start_ns=first["t_start_ns"] - 100 * S, t_end_ns=first["t_end_ns"] - 100 * S)
            else:
                first = first.assign(train_s=99.0)
            pd.concat([first, df.assign(attempt=1)]).to_parquet(f)
    r = _run(analyze(None, tmp_path))
    assert r["samples"] == 1920 and r["epochs"] == 3 and r["steady_epoch_s"] == pytest.approx(7.5)


def _budgets(tmp_path: Path, applied: dict[str, float], enforced: bool = True) -> Analysis:
    from tests.unit._analysis_runs import set_meta

    single_run(tmp_path, BASE, started="2026-01-01T00:00:00Z")
    path = write_run(tmp_path, STRAG, started="2026-01-01T01:00:00Z")[0]
    cluster = {**json_of(path)["cluster"], "cpu_budget": {
        "emulated": True, "host_budgets_cores": {"a": 3.0, "b": 1.0}, "enforced": enforced,
        "applied": {"host_budgets_cores": applied}}}
    set_meta(path, cluster=cluster)
    return analyze(None, tmp_path)


def json_of(path: Path) -> dict:
    import json

    return json.loads((path / "run.json").read_text())


def test_the_applied_budget_is_used_and_a_difference_is_named(tmp_path: Path) -> None:
    a = _budgets(tmp_path, {"a": 3.0, "b": 2.0})  # host b's workers could use two cores, not the one asked
    hosts = a.hosts[a.hosts["run_id"] == STRAG].set_index("host")
    assert hosts.loc["b", "budget_cores"] == 2.0 and hosts.loc["b", "budget_requested_cores"] == 1.0
    assert hosts.loc["b", "budget_share_mean"] == pytest.approx(0.5)
    text = "\n".join(a.verdict)
    assert "Applied budgets differ from the request: b 2 cores given vs 1 asked." in text
    assert "NOT enforced" not in text


def test_unenforced_budgets_mark_every_budget_figure(tmp_path: Path) -> None:
    a = _budgets(tmp_path, {"a": 3.0, "b": 1.0}, enforced=False)
    line = next(v for v in a.verdict if "Host CPU against its budget" in v)
    assert line.startswith("Budgets NOT enforced (--allow-unenforced") and "differ" not in line
    assert not a.hosts[a.hosts["run_id"] == STRAG]["budget_enforced"].any()


def test_the_verdict_names_the_network_when_transfer_is_the_largest_term(tmp_path: Path) -> None:
    from perfkit.analysis.analyze import describe_links

    a = _pair(tmp_path, transfer=0.9)  # compute 0.2/0.5 s, transfer 0.9 s per step
    run = _run(a)
    assert run["largest_term"] == "transfer" and run["transfer_share"] > 0.5
    assert any("The network between the workers sets the pace" in v for v in a.verdict)
    assert f"; the all-reduce not hidden under compute is the largest cost, {run['transfer_share']:.0%} of step " \
        "time;" in a.verdict[0]
    assert _run(_pair(tmp_path / "b"))["largest_term"] != "transfer"
    assert describe_links(typed(
        {"network": {"links": {"a": {"requested": {"bandwidth_mbit": 100, "latency_ms": 5}}}}})) \
        == "a 100 Mbit/s + 5 ms"


def test_equal_workers_wait_for_the_slowest_of_their_own_step_to_step_variation(tmp_path: Path) -> None:
    """Two workers of 0.2 s median-ish compute, worker 0 slower late in an epoch and worker 1 early: every
    step waits for whichever is slower, so the equal-workers step is not the median worker's."""
    import numpy as np

    single_run(tmp_path, BASE, started="2026-01-01T00:00:00Z")
    [path] = write_run(tmp_path, STRAG, started="2026-01-01T01:00:00Z", hosts=(("a", 1.0, 1), ("b", 1.0, 1)),
                       busy={0: 0.2, 1: 0.2})
    trace = pd.read_parquet(path / "trace_steps.parquet")
    k = np.where(trace["worker"] == 0, trace["step"], 9 - trace["step"])
    factor = 1 + 0.02 * k  # per worker: 1.00 ... 1.18, median 1.09
    trace.assign(compute_s=trace["compute_s"] * factor, other_s=trace["other_s"] * factor).to_parquet(
        path / "trace_steps.parquet")
    run = _run(analyze(None, tmp_path))
    slowest = 0.2 * (1 + 0.02 * np.maximum(np.arange(10), 9 - np.arange(10)))  # the slower worker, per step
    assert run["equal_step_s"] == pytest.approx(slowest.mean() + 0.1 + 0.05)
    # validation waits the same way: 1.0 s x the median step's slowest / the slowest worker's median
    assert run["equal_val_s"] == pytest.approx(1.0 * float(np.median(slowest)) / (0.2 * 1.09))
    assert run["equal_epoch_s"] == pytest.approx(10 * run["equal_step_s"] + run["equal_val_s"])
    assert "keeping its own step-to-step variation (a step waits for the slowest: x1.046" in run["equal_assumptions"]


def test_placement_on_emulated_hosts_counts_the_cores_a_worker_can_use(tmp_path: Path) -> None:
    """Emulated hosts share one machine's cores: the work per step is 0.5 core x 0.3 s = 0.15 core-s, and the
    worker on the 1.5-core host used 1 core of it (0.15 s). Two workers there get 0.75 core each: 0.2 s,
    against the slow worker's 0.3 s now. (Throughput sharing would have said 2 x 0.15 = 0.3 s: no gain.)"""
    from tests.unit._analysis_runs import set_meta

    single_run(tmp_path, BASE, started="2026-01-01T00:00:00Z")
    [path] = write_run(tmp_path, STRAG, started="2026-01-01T01:00:00Z", hosts=(("fast", 1.5, 1), ("slow", 0.5, 1)),
                       busy={0: 0.15, 1: 0.3})
    set_meta(path, cluster=json_of(path)["cluster"] | {"emulated": True})
    a = analyze(None, tmp_path)
    run = _run(a)
    assert run["placement_now"] == "1:1" and run["placement_proposed"] == "2:0"
    assert run["compute_now_s"] == pytest.approx(0.3) and run["compute_proposed_s"] == pytest.approx(0.2)
    # The slow worker (the last to every all-reduce) was held to 0.5 core, so its share of the exchange
    # scales like its compute: transfer 0.1 s x 0.2 / 0.3. 10 steps x (0.2 + that + 0.05 input) +
    # validation 1.0 s x 0.2 / 0.3
    assert run["placement_epoch_s"] == pytest.approx(10 * (0.2 + 0.1 * 0.2 / 0.3 + 0.05) + 1.0 * 0.2 / 0.3)
    assert "scaled like the compute" in run["placement_assumptions"]
    assert run["equal_transfer_source"] == "scaled run"


def test_a_shaped_link_keeps_the_runs_own_transfer(tmp_path: Path) -> None:
    """Behind a shaped link the transfer is the link's, not CPU work in the slow worker's budget: the same
    run as above with a 100 Mbit/s link keeps 0.1 s per step."""
    from tests.unit._analysis_runs import set_meta

    single_run(tmp_path, BASE, started="2026-01-01T00:00:00Z")
    [path] = write_run(tmp_path, STRAG, started="2026-01-01T01:00:00Z", hosts=(("fast", 1.5, 1), ("slow", 0.5, 1)),
                       busy={0: 0.15, 1: 0.3})
    set_meta(path, cluster=json_of(path)["cluster"] | {"emulated": True},
             network={"links": {"slow": {"requested": {"bandwidth_mbit": 100}}}})
    run = _run(analyze(None, tmp_path))
    assert run["equal_transfer_source"] == "run" and run["equal_transfer_s"] == pytest.approx(0.1)
    assert run["placement_epoch_s"] == pytest.approx(10 * (0.2 + 0.1 + 0.05) + 1.0 * 0.2 / 0.3)
    assert "shared by the workers placed on it, 200 ms on the slowest" in run["placement_assumptions"]


def test_a_placement_that_moves_nobody_has_no_placement_epoch(tmp_path: Path) -> None:
    a = _pair(tmp_path, hosts=(("a", 1.0, 1), ("b", 1.0, 1)), busy={0: 0.2, 1: 0.2})
    run = _run(a)
    assert run["placement_proposed"] == run["placement_now"] == "1:1"
    assert run["placement_epoch_s"] != run["placement_epoch_s"]  # NaN


def test_what_if_uses_the_calibrated_transfer_and_ignores_a_stalled_step(tmp_path: Path) -> None:
    from tests.unit._analysis_runs import set_meta

    single_run(tmp_path, BASE, started="2026-01-01T00:00:00Z")
    [path] = write_run(tmp_path, STRAG, started="2026-01-01T01:00:00Z")
    trace = pd.read_parquet(path / "trace_steps.parquet")
    stall = (trace["epoch"] == 1) & (trace["step"] == 3)
    trace.loc[stall, "compute_s"] += 5.0  # every worker stalled 5 s in one step
    trace.assign(collectives=11).to_parquet(path / "trace_steps.parquet")  # the gradients + 10 scalars
    meta = json_of(path)
    for w in meta["workers"]:
        w["calibration"] = {"gradients_s": 0.02, "one_float_s": 0.001}
    set_meta(path, workers=meta["workers"])
    run = _run(analyze(None, tmp_path))
    # transfer: min(the run's own 0.1 s, calibration 0.02 + 10 x 0.001) = 0.03 s from the calibration
    assert run["equal_transfer_s"] == pytest.approx(0.03) and run["equal_transfer_source"] == "calibration"
    assert run["equal_step_s"] == pytest.approx(0.2 + 0.03 + 0.05), "the stalled step is left out"
    assert run["equal_epoch_s"] == pytest.approx(10 * 0.28 + 0.4)
    assert "the smaller of this run's own 100.0 ms and the workers' all-reduce calibration" in run["equal_assumptions"]


def test_validation_and_time_outside_steps_come_from_the_epochs_without_the_trace_window(tmp_path: Path) -> None:
    """The window's epoch (the second) also pays for writing the capture: 2 s more outside its steps and a
    validation of 3 s instead of 1 s. The prediction takes both from the third epoch, and says so."""
    single_run(tmp_path, BASE, started="2026-01-01T00:00:00Z")
    [path] = write_run(tmp_path, STRAG, started="2026-01-01T01:00:00Z", hosts=(("a", 1.0, 1), ("b", 1.0, 1)),
                       busy={0: 0.2, 1: 0.2})
    trace = pd.read_parquet(path / "trace_steps.parquet")
    trace[trace["epoch"] == 1].to_parquet(path / "trace_steps.parquet")
    for w in (0, 1):
        f = path / "workers" / str(w) / "epochs.parquet"
        ep = pd.read_parquet(f)
        ep.loc[ep["epoch"] == 1, "val_s"] = 3.0
        ep.loc[ep["epoch"] == 1, "train_s"] += 2.0
        ep.to_parquet(f)
    run = _run(analyze(None, tmp_path))
    assert run["split_source"] == "trace"
    # 10 steps x (0.2 busy + 0.1 transfer + 0.05 input), nothing outside them, validation 1.0 s (epoch 3)
    assert run["equal_epoch_s"] == pytest.approx(3.5 + 1.0)
    assert run["equal_val_s"] == pytest.approx(1.0)
    assert "(validation and time outside steps from epoch 3: the trace window's epoch left out)" \
        in run["equal_assumptions"]


def test_a_run_that_trains_more_samples_per_epoch_is_compared_per_sample(tmp_path: Path) -> None:
    """Keeping the per-worker batch (TensorFlow's tutorials) doubles an epoch's samples on 4 workers: the
    speedup is per sample, not per epoch, and the verdict says so."""
    a = _pair(tmp_path, batch=128)
    base, run = _run(a, BASE), _run(a)
    assert run["steady_epoch_samples"] == 2 * base["steady_epoch_samples"] == 1280
    assert run["work_ratio"] == pytest.approx(2.0)
    assert run["speedup"] == pytest.approx(11.5 / 7.5 * 2) and run["speedup_fit"] == pytest.approx(34.5 / 22.5 * 2)
    assert run["efficiency"] == pytest.approx(11.5 / 7.5 * 2 / 4)
    assert any("1,280 samples vs 640, so speedup per sample" in line for line in a.verdict)
    assert a.verdict[0].startswith(f"4 workers are {11.5 / 7.5 * 2:.2f}x faster than one machine per sample; ")


def test_the_step_timeline_places_every_workers_steps_and_the_equal_workers_ones(tmp_path: Path) -> None:
    """Worker 3 (0.5 s compute) is the straggler of every step; the others wait 0.3 s for it. Equal workers
    (0.2 s compute each) run the same steps in 0.35 s: compute + the 0.1 s transfer + 0.05 s input."""
    a = _pair(tmp_path)
    t = a.step_timeline[a.step_timeline["run_id"] == STRAG]
    run, what = t[t["kind"] == "run"], t[t["kind"] == "equal workers"]
    assert set(a.step_timeline["run_id"]) == {STRAG}, "one worker: nobody to wait for, no timeline"
    assert sorted(run["worker"].unique()) == [0, 1, 2, 3] and (what["worker"] == -1).all()
    per_worker = run.groupby("worker").size()
    assert (per_worker == len(what)).all() and len(what) > 0
    assert run.loc[run["worker"] == 3, "straggler"].all() and not run.loc[run["worker"] < 3, "straggler"].any()
    assert run.loc[run["worker"] < 3, "wait_s"].to_numpy() == pytest.approx(0.3)
    terms = run[["input_s", "compute_s", "wait_s", "transfer_s"]].sum(axis=1)
    assert terms.to_numpy() == pytest.approx(run["step_s"].to_numpy())
    assert what["step_s"].to_numpy() == pytest.approx(0.35)
    assert run["start_s"].min() == 0 and what["start_s"].iloc[0] == 0
    assert (what["start_s"].diff().dropna() > 0).all() and run["start_s"].max() > what["start_s"].max()


def test_advice_ranks_causes_by_their_share_of_a_steady_epoch_with_a_knob_and_a_prediction(tmp_path: Path) -> None:
    """STRAG: 7.5 s steady epochs of 10 steps. Workers 0-2 wait 0.3 s for worker 3 (mean 0.225 s: 30%); the
    0.1 s exposed transfer can hide under up to 2/3 of compute; other_s = 0.25 x busy (mean 0.275 s)."""
    a = _pair(tmp_path)
    adv = a.advice[a.advice["run_id"] == STRAG].set_index("rank")
    assert list(adv.index) == list(range(1, len(adv) + 1)) and adv["cost_share"].is_monotonic_decreasing
    wait, grad = adv.iloc[0], adv[adv["kind"] == CauseKind.GRADIENTS.value].iloc[0]
    assert wait["kind"] == CauseKind.STRAGGLER.value and wait["cost_share"] == pytest.approx(0.30)
    assert wait["predicted_speedup"] == pytest.approx(7.5 / _run(a)["equal_epoch_s"])
    assert (grad["option"], grad["value"]) == ("bytes_per_pack", 1 << 20) and grad["predicted_lo"] == pytest.approx(1.0)
    # no collective of the chain besides the gradients' to cost another pack, and nothing hidden predicted
    assert grad["predicted_hi"] == pytest.approx(7.5 / 6.5) and grad["predicted_speedup"] == pytest.approx(1.0)
    spe = adv[(adv["option"] == "steps_per_execution") & (adv["value"] == 8)].iloc[0]
    assert spe["cost_s"] == pytest.approx(0.25 * 0.275)
    assert spe["predicted_speedup"] == pytest.approx(7.5 / (7.5 - 10 * 0.25 * 0.275 * 7 / 8))
    assert spe["predicted_hi"] == pytest.approx(7.5 / (7.5 - 10 * 0.25 * 0.275))
    assert (a.advice["run_id"] != BASE).all(), "one worker: no advice"
    # the larger cost first would be the gradients', but a knob predicted to gain nothing is not the advice
    assert any(v.startswith("Advice: per-step framework time (Python, function dispatch, callbacks) costs 9% of a "
                            "steady epoch: try --steps-per-execution 8, predicted 1.09x (1.09–1.10x) (not yet); 4 more")
               for v in a.verdict)


def test_steps_per_worker_are_shown_only_for_runs_of_several_workers(tmp_path: Path) -> None:
    # a run of one worker ran all its steps by definition: "0 100%" says nothing (issue 52)
    single_run(tmp_path, "20260101T000000Z-single-base")
    write_run(tmp_path, "20260101T010000Z-multi-strag")
    runs = analyze(None, tmp_path).runs.set_index("run_id")
    assert pd.isna(runs.loc["20260101T000000Z-single-base", "step_shares"])
    assert runs.loc["20260101T010000Z-multi-strag", "step_shares"].startswith("0 ")
