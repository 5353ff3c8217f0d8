"""Every benchmark script on one host in its ``--smoke`` size (those on emulated clusters:
test_bench_clusters.py) (the tiny preset cut to a few steps an epoch, one repeat)
through ``python -m benchmarks``: it exits 0, prints a Markdown table and writes its JSON with the expected keys
and sane figures.

The real measurements are run by hand (see bench/); these only prove the scripts still work.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration._bench import bench, positive, smoke

pytestmark = pytest.mark.integration

@pytest.mark.timeout(480)
def test_overhead_smoke(tmp_path: Path) -> None:
    r = smoke("overhead", tmp_path)["results"]
    for arm in ("bare", "instrumented", "untraced", "watched"):
        positive(r[arm]["steady_epoch_wall_s"])
        positive(r[arm]["steady_samples_per_s"])
    # perfkit watch attached to a run: its cost to the run and its own CPU (a share of one core)
    w = r["watcher"]
    assert 0.3 < positive(w["ratio_to_untraced"]) < 5 and 0 < positive(w["watcher_share"]) < 0.5
    # its start-up measured apart (on the finished run), and what it takes once started
    assert 0 < positive(w["watcher_start_cpu_s"]) < 30 and isinstance(w["watcher_running_share"]["median"], float)
    assert w["meets_cpu"] in (True, False) and w["within_noise"] in (True, False, None)
    assert r["instrumented"]["runs"][0]["run_dir"]
    for arm in ("instrumented", "untraced"):
        assert 0.3 < positive(r["ratio"][arm]["steady_epoch_wall"]) < 5
        assert r["meets_target"][arm] in (True, False)
    instrumented, untraced = r["instrumented"]["steady_epoch_wall_s"], r["untraced"]["steady_epoch_wall_s"]
    assert r["window_cost_s"]["median"] == pytest.approx(instrumented["median"] - untraced["median"])
    untraced_run = json.loads((Path(r["untraced"]["runs"][0]["run_dir"]) / "run.json").read_text())
    assert untraced_run["config"]["profile_steps"] == "off"
    # the untraced side accounted piece by piece: the recorder's per-step cost timed in isolation (tf-keras
    # skips the hooks with no callback, so the recorder's arm is the slower) and the sampler's CPU share
    a = r["accounted"]
    hooks = a["hook_cost"]
    assert hooks["rounds"] == 2 and hooks["refresh_hz"] == 2.0 and 0 < hooks["redraw_ms"] < 1000
    assert all(q > n for q, n in zip(hooks["us_per_step"]["quiet"], hooks["us_per_step"]["none"], strict=True))
    assert 0 < hooks["recorder_us_per_step"]["quiet"] < 1000 and 0 < positive(a["sampler_share"]) < 0.5
    per_step_s = hooks["recorder_us_per_step"]["quiet"] * 1e-6
    assert a["recorder_share"] == pytest.approx(per_step_s * positive(a["steps_per_s"]))
    assert a["untraced_ratio"] == pytest.approx(1 + a["recorder_share"] + a["sampler_share"]["median"])
    assert a["untraced_in_terminal_ratio"] > a["untraced_ratio"] and a["meets_target"] in (True, False)


@pytest.mark.timeout(480)
def test_autorecord_smoke(tmp_path: Path) -> None:
    r = smoke("autorecord", tmp_path)["results"]
    for example in ("keras_fit", "custom_loop"):
        for arm in ("bare", "launched", "launcher_only"):
            positive(r[example][arm]["steady_step_s"])
        assert r[example]["launched"]["recorded_steps"] == [2 * 5], "the hook recorded every step"
        assert r[example]["launcher_only"]["recorded_steps"] == [0], "--no-auto-record recorded none"
        assert 0.3 < positive(r[example]["ratio"]) < 5
    assert r["meets_target"] in (True, False)


@pytest.mark.timeout(480)
def test_trainer_smoke(tmp_path: Path) -> None:
    r = smoke("trainer", tmp_path)["results"]
    for arm in ("article", "perfkit"):
        positive(r[arm]["steady_samples_per_s"])
        positive(r["flops"][arm]["achieved_flop_per_s"])
        assert 0 < positive(r["flops"][arm]["share_of_matmul"]) < 5
    assert r["article"]["runs"][0]["extra"]["params"] == 441_729  # the same model on both sides
    # the same cached file on both sides: the smoke's 1024 + 256 players (benchmarks._common.SMOKE_PLAYERS)
    assert r["article"]["runs"][0]["extra"]["data"].endswith("synth-v1-1280p-7d-seed20190101.parquet")
    assert r["flops"]["matmul"]["flop_per_s"] > 1e8
    assert r["flops"]["train_flops_per_sample"] > 1e7
    positive(r["ratio"]["steady_samples_per_s"])


@pytest.mark.slow
@pytest.mark.timeout(620)
def test_multiworker_smoke(tmp_path: Path) -> None:
    r = smoke("multiworker", tmp_path, timeout=560)["results"]
    for arm in ("single", "2w pinned", "2w unpinned"):
        positive(r[arm]["steady_samples_per_s"])
    positive(r["ratio_to_single"]["2w pinned"])
    assert r["verdicts"]["2w default_is_better"] in (True, False)


@pytest.mark.timeout(480)
def test_datagen_smoke(tmp_path: Path) -> None:
    r = smoke("datagen", tmp_path)["results"]
    positive(r["wall_s"])
    assert positive(r["peak_rss_bytes"]) > 10 * 2**20
    assert r["runs"][0]["file_bytes"] > 0 and r["meets_target"] is None  # targets are for the blog size


@pytest.mark.timeout(480)
def test_analysis_smoke(tmp_path: Path) -> None:
    r = smoke("analysis-speed", tmp_path)["results"]
    assert r["4w"]["generated"]["workers"] == 4 and r["16w"]["generated"]["workers"] == 16
    for case, arms in (("4w", ("uncached", "cached")), ("16w", ("uncached",))):
        assert r[case]["generated"]["steps_per_worker"] > 0 and set(r[case]["meets"].values()) == {None}
        for arm in arms:
            positive(r[case]["arms"][arm]["wall_s"])
            positive(r[case]["arms"][arm]["peak_rss_bytes"])
    assert not (tmp_path / "bench" / "runs").exists() or not any((tmp_path / "bench" / "runs").iterdir())


@pytest.mark.timeout(240)
def test_engines_smoke(tmp_path: Path) -> None:
    import importlib.util

    data = smoke("engines", tmp_path, "--case", "16w")
    r = data["results"]
    assert r["generated"]["workers"] == 16 and r["perfkit"]["agrees_with_perfkit"] is True
    positive(r["perfkit"]["wall_s"])
    positive(r["perfkit"]["peak_rss_bytes"])
    for engine in ("polars", "duckdb"):  # polars is optional (pip install -e ".[bench]"): measured, or named as missing
        if importlib.util.find_spec(engine) is None:
            assert engine in r["not_installed"] and engine not in r
        else:
            assert r[engine]["agrees_with_perfkit"] is True, r[engine]
            positive(r[engine]["wall_s"])


@pytest.mark.timeout(240)
def test_allreduce_smoke(tmp_path: Path) -> None:
    import gzip  # only this test reads the xplane fixtures

    # A run directory holding the repo's real 2-worker captures (22 collectives per step): --run takes K
    # from them and sets the traced figures beside the isolated ones.
    run = tmp_path / "run"
    profile = {}
    for w in (0, 1):
        rel = f"tensorboard/plugins/profile/s/vm-w{w}.xplane.pb"
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        packed = (Path(__file__).parents[1] / "data" / f"tiny-2w-w{w}.xplane.pb.gz").read_bytes()
        (run / rel).write_bytes(gzip.decompress(packed))
        profile[str(w)] = {"status": "captured", "file": rel}
    config = {"params": {"sequence_length": 7}}
    (run / "run.json").write_text(json.dumps({"config": config, "profile": {"workers": profile}}))
    data = smoke("allreduce", tmp_path / "out", "--run", str(run), timeout=180)
    r, k = data["results"], data["params"]["small"]
    assert k == r["traced"]["small"] == 21 and data["params"]["small_from"] == "from the traced collectives"
    assert [w["replicas"] for w in r["workers"]] == [2, 2] and all(w["correct"] for w in r["workers"])
    assert {w["core"] for w in r["workers"]} <= {0, 1} and r["workers"][0]["threads"]["intra_op"] == 1
    assert len(r["workers"][0]["shapes"]) == 10  # the LSTM's trainable variables, as Keras all-reduces them
    arms = r["arms"]
    assert arms["gradients"]["tensors"] == 10 and arms["gradients"]["floats"] == 441_729
    assert arms["one pack"]["bytes"] == 441_729 * 4 and arms["one float"]["floats"] == 1
    assert arms["step"]["tensors"] == 10 + k and arms["step"]["floats"] == 441_729 + k
    for arm in ("gradients", "one pack", "one float", "step"):
        assert positive(arms[arm]["worker0_ms"]) < 10_000
        assert arms[arm]["worker0_ms"]["n"] == 5 and arms[arm]["worker0_ms"]["p10"] <= arms[arm]["worker0_ms"]["p90"]
        assert positive(arms[arm]["max_over_workers_ms"]) >= arms[arm]["worker0_ms"]["min"]
    assert r["traced"]["workers"] == ["0", "1"] and r["traced"]["steps"] == 2
    for name, arm in (("transfer", "step"), ("gradient_allreduce", "gradients")):
        c = r["comparison"][name]
        assert c["arm"] == arm and c["isolated_ms"] == arms[arm]["worker0_ms"]["median"]
        assert c["ratio"] == pytest.approx(positive(r["traced"][f"{name}_ms"]) / c["isolated_ms"])


@pytest.mark.timeout(660)
def test_trace_reliability_smoke(tmp_path: Path) -> None:
    data = smoke("trace-reliability", tmp_path, timeout=600)
    row = data["results"]["in-process 2w"]
    assert row["n"] == 1 and row["workers"] == "2" and data["params"]["profile_retries"] == 3
    [run] = row["runs"]
    # A lost trace is retried by the run (docs/tf-profiler-crash.md): it must end with every worker's.
    assert run["status"] == "complete" and run["complete"] is True, run
    assert run["first_attempt_complete"] == (run["crashes"] == 0)
    assert isinstance(run["overhead"], float) and run["overhead"] > 0, run  # a figure, not a target


@pytest.mark.timeout(120)
def test_unknown_benchmark_is_a_one_line_usage_error() -> None:
    proc = bench("no-such-bench", timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "overhead" in lines[0] and "article" in lines[0]


@pytest.mark.timeout(120)
def test_python_m_bench_lists_the_benchmarks() -> None:
    proc = bench(timeout=60)
    assert proc.returncode == 2 and "multiworker" in proc.stdout


@pytest.mark.timeout(480)
def test_ps_clock_smoke(tmp_path: Path) -> None:
    r = smoke("ps-clock", tmp_path)["results"]
    for arm in ("clock", "no clock"):
        positive(r[arm]["steady_epoch_s"])
    assert 0.3 < positive(r["ratio"]["steady_epoch"]) < 5
    assert r["meets_target"] in (True, False)


@pytest.mark.timeout(360)
def test_startup_smoke(tmp_path: Path) -> None:
    r = smoke("startup", tmp_path, "--exec")["results"]
    assert set(r) == {"single", "2 workers", "2 workers (exec)", "meets_target"} and r["meets_target"] == {}
    for arm in ("single", "2 workers", "2 workers (exec)"):
        positive(r[arm]["startup_s"])
        assert positive(r[arm]["cpu_s"]) > r[arm]["startup_s"]["median"] / 4, "CPU seconds of the whole command"
    # exec: two workers import TensorFlow twice, and the command's CPU seconds say so
    assert r["2 workers (exec)"]["cpu_s"]["median"] > r["single"]["cpu_s"]["median"]
    assert positive(r["2 workers"]["ratio_to_single"]) == pytest.approx(
        r["2 workers"]["startup_s"]["median"] / r["single"]["startup_s"]["median"], rel=1e-6)
    # where a worker's start-up went: every phase from the launcher to the first step, adding up to it
    first = {"2 workers": ["launcher", "import (fork server)", "fork", "python"],
             "2 workers (exec)": ["launcher", "python"]}
    for arm in ("2 workers", "2 workers (exec)"):
        phases = {p["phase"]: p for p in r[arm]["phases"]}
        assert list(phases)[:len(first[arm])] == first[arm] and list(phases)[-1] == "training", list(phases)
        assert {"connecting", "joined"} <= set(phases) and all(p["wall_s"] >= 0 for p in phases.values())
        assert sum(p["wall_s"] for p in phases.values()) <= r[arm]["startup_s"]["median"] * 1.5
    worker_cpu = {arm: sum(p["cpu_s"] or 0 for p in r[arm]["phases"]) for arm in ("2 workers", "2 workers (exec)")}
    assert worker_cpu["2 workers (exec)"] > 1, "TensorFlow's import alone takes seconds of CPU"
    # forked from the fork server, a worker skips that import: its CPU before the first step is a fraction
    assert worker_cpu["2 workers"] < worker_cpu["2 workers (exec)"] / 2, worker_cpu
    assert r["single"]["phases"] == [], "a single run reports no worker states"
