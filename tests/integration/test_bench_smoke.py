"""Every benchmark script in its ``--smoke`` size (tiny preset, one repeat) through ``perfkit bench``:
it exits 0, prints a Markdown table and writes its JSON with the expected keys and sane figures.

The real measurements are run by hand (see bench/); these only prove the scripts still work.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration._util import perfkit

pytestmark = pytest.mark.integration

MACHINE_KEYS = {"cpu_model", "logical_cores", "memory_bytes"}


def smoke(name: str, tmp_path: Path, *extra: str, timeout: float = 420) -> dict[str, Any]:
    proc = perfkit("bench", name, "--smoke", "--results-root", str(tmp_path), *extra, timeout=timeout)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "| ---" in proc.stdout, proc.stdout
    files = list((tmp_path / "bench").glob(f"{name}-*.json"))
    assert len(files) == 1, files
    data = json.loads(files[0].read_text())
    assert data["benchmark"] == name and data["ok"] is True and data["errors"] == []
    assert MACHINE_KEYS <= set(data["machine"]) and data["machine"]["logical_cores"] >= 1
    assert data["params"]["repeats"] == 1
    return data


def positive(stats: dict[str, Any]) -> float:
    assert stats["n"] >= 1 and stats["failed"] == 0, stats
    assert 0 < stats["min"] <= stats["median"] <= stats["max"], stats
    return float(stats["median"])


def test_overhead_smoke(tmp_path: Path) -> None:
    r = smoke("overhead", tmp_path)["results"]
    for arm in ("bare", "instrumented"):
        positive(r[arm]["steady_epoch_wall_s"])
        positive(r[arm]["steady_samples_per_s"])
    assert r["instrumented"]["runs"][0]["run_dir"]
    assert 0.3 < positive(r["ratio"]["steady_epoch_wall"]) < 5
    assert r["meets_target"] in (True, False)


def test_trainer_smoke(tmp_path: Path) -> None:
    r = smoke("trainer", tmp_path)["results"]
    for arm in ("article", "perfkit"):
        positive(r[arm]["steady_samples_per_s"])
        positive(r["flops"][arm]["achieved_flop_per_s"])
        assert 0 < positive(r["flops"][arm]["share_of_matmul"]) < 5
    assert r["article"]["runs"][0]["extra"]["params"] == 441_729  # the same model on both sides
    assert r["article"]["runs"][0]["extra"]["data"].endswith("synth-v1-2560p-7d-seed20190101.parquet")
    assert r["flops"]["matmul"]["flop_per_s"] > 1e8
    assert r["flops"]["train_flops_per_sample"] > 1e7
    positive(r["ratio"]["steady_samples_per_s"])


@pytest.mark.slow
def test_multiworker_smoke(tmp_path: Path) -> None:
    r = smoke("multiworker", tmp_path, timeout=560)["results"]
    for arm in ("single", "2w pinned", "2w unpinned"):
        positive(r[arm]["steady_samples_per_s"])
    positive(r["ratio_to_single"]["2w pinned"])
    assert r["verdicts"]["2w default_is_better"] in (True, False)


def test_datagen_smoke(tmp_path: Path) -> None:
    r = smoke("datagen", tmp_path)["results"]
    positive(r["wall_s"])
    assert positive(r["peak_rss_bytes"]) > 10 * 2**20
    assert r["runs"][0]["file_bytes"] > 0 and r["meets_target"] is None  # targets are for the blog size


def test_analysis_smoke(tmp_path: Path) -> None:
    r = smoke("analysis", tmp_path)["results"]
    assert r["generated"]["workers"] == 4 and r["generated"]["steps_per_worker"] > 0
    for arm in ("default", "json"):
        positive(r[arm]["wall_s"])
        positive(r[arm]["peak_rss_bytes"])
    assert not (tmp_path / "bench" / "runs").exists() or not any((tmp_path / "bench" / "runs").iterdir())


@pytest.mark.slow
def test_article_smoke(tmp_path: Path) -> None:
    # Two lightly budgeted emulated hosts instead of the article's 1.6 + 0.4 cores, whose tiny run alone
    # takes ~2 minutes here: the same code path (cluster file, emulated hosts, analyze) in a third of it.
    cluster = tmp_path / "cluster.toml"
    cluster.write_text("".join(f'[[hosts]]\nname = "{n}"\naddress = "{a}"\ncores = {c}\nworkers = 1\n'
                               f"base_port = 20000\n\n" for n, a, c in (("big", "127.0.0.1", 3),
                                                                          ("small", "127.0.0.2", 1))))
    data = smoke("article", tmp_path, "--cluster", str(cluster), timeout=560)
    r = data["results"]
    positive(r["single"]["steady_epoch_s"])
    positive(r["multi"]["steady_epoch_s"])
    positive(r["speedup"]["steady_epoch"])
    assert r["analysis"]["verdict"] and Path(r["analysis"]["json"]).is_file()
    assert {w["host"] for w in r["multi_worker_cpu"]} == {"big", "small"}
    assert data["targets"]["article"]["single"]["steady_epoch_s"] == 100.0


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
    (run / "run.json").write_text(json.dumps({"config": {"sequence_length": 7}, "profile": {"workers": profile}}))
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


def test_trace_reliability_smoke(tmp_path: Path) -> None:
    data = smoke("trace-reliability", tmp_path, timeout=600)
    row = data["results"]["in-process 2w"]
    assert row["n"] == 1 and row["workers"] == "2" and data["params"]["profile_retries"] == 3
    [run] = row["runs"]
    # A lost trace is retried by the run (docs/tf-profiler-crash.md): it must end with every worker's.
    assert run["status"] == "complete" and run["complete"] is True, run
    assert run["first_attempt_complete"] == (run["crashes"] == 0)
    assert isinstance(run["overhead"], float) and run["overhead"] > 0, run  # a figure, not a target


def test_network_smoke(tmp_path: Path) -> None:
    from perfkit.trainer.netns import why_unavailable

    if why_unavailable():
        pytest.skip(f"bench network needs network namespaces: {why_unavailable()}")
    r = smoke("network", tmp_path, timeout=420)["results"]
    assert list(r) == ["unshaped", "20 Mbit/s"]
    fast, slow = r["unshaped"], r["20 Mbit/s"]
    assert fast["runs"][0]["extra"]["split_source"] == "trace" == slow["runs"][0]["extra"]["split_source"]
    # ~1.8 MB of gradients per step: at 20 Mbit/s each all-reduce takes most of a second.
    assert slow["transfer_s_ms"] > 5 * fast["transfer_s_ms"] and slow["largest_term"] == "transfer"
    assert slow["runs"][0]["extra"]["links"] == "host0 20 Mbit/s, host1 20 Mbit/s"
    assert "network between the workers sets the pace" in slow["runs"][0]["extra"]["network_sentence"]


def test_whatif_smoke(tmp_path: Path) -> None:
    r = smoke("whatif", tmp_path, timeout=900)["results"]
    row = r["rows"][0]
    assert row["cluster"] == "2w 1.5/0.5" and row["what"] == "equal workers" and row["split_source"] == "trace"
    assert [x["what"] for x in r["rows"][1:]] in ([], ["placement"])  # placement only where it moves a worker
    for x in r["rows"]:
        assert positive({"n": 1, "failed": 0, "min": x["measured_epoch_s"], "median": x["measured_epoch_s"],
                         "max": x["measured_epoch_s"]}) > 0
        predicted = x["prediction"]["predicted_epoch_s"]
        assert x["error_ratio"] == (predicted - x["measured_epoch_s"]) / x["measured_epoch_s"]
    assert r["rows_measured"] == len(r["rows"]) and r["meets_target"] in (True, False)
    assert r["abs_error_max"] == max(abs(x["error_ratio"]) for x in r["rows"])
    # one repeat: each cluster's what-if is its one run, and the verification traced its first epoch only
    assert [(s["what"], s["per_run_errors"]) for s in r["summary"]] == [(x["what"], [x["error_ratio"]]) for x in r["rows"]]

    from perfkit.analysis.verify import verification_window_of

    spec = json.loads((Path(row["check"]["run_dir"]) / "run.json").read_text())["profile"]["spec"]
    assert spec == verification_window_of(Path(row["unequal"]["run_dir"])) != "off"


def test_unknown_benchmark_is_a_one_line_usage_error() -> None:
    proc = perfkit("bench", "no-such-bench", timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "overhead" in lines[0] and "article" in lines[0]


def test_python_m_bench_lists_the_benchmarks() -> None:
    proc = subprocess.run([sys.executable, "-m", "perfkit.bench"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "multiworker" in proc.stdout


def test_ps_clock_smoke(tmp_path: Path) -> None:
    r = smoke("ps-clock", tmp_path)["results"]
    for arm in ("clock", "no clock"):
        positive(r[arm]["steady_epoch_s"])
    assert 0.3 < positive(r["ratio"]["steady_epoch"]) < 5
    assert r["meets_target"] in (True, False)
