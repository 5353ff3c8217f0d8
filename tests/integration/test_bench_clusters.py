"""The benchmarks that run emulated clusters, in their ``--smoke`` size through ``python -m benchmarks`` (a file of
their own, so that the two test workers share the suite's longest runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import clusters
from tests.integration._bench import positive, smoke

pytestmark = pytest.mark.integration


@pytest.mark.slow
@pytest.mark.timeout(620)
def test_article_smoke(tmp_path: Path) -> None:
    # Two lightly budgeted emulated hosts instead of the article's 1.6 + 0.4 cores, whose tiny run alone
    # takes ~2 minutes here: the same code path (cluster file, emulated hosts, analyze) in a third of it.
    cluster = clusters.write(tmp_path / "cluster.toml", clusters.pair((3, 1), ("big", "small"), base_port=20000))
    data = smoke("article", tmp_path, "--cluster", str(cluster), timeout=560)
    r = data["results"]
    positive(r["single"]["steady_epoch_s"])
    positive(r["multi"]["steady_epoch_s"])
    positive(r["speedup"]["steady_epoch"])
    assert r["analysis"]["verdict"] and Path(r["analysis"]["json"]).is_file()
    assert {w["host"] for w in r["multi_worker_cpu"]} == {"big", "small"}
    assert data["targets"]["article"]["single"]["steady_epoch_s"] == 100.0


@pytest.mark.timeout(480)
def test_network_smoke(tmp_path: Path) -> None:
    from perfkit.trainer.hosts.netns import why_unavailable

    if why_unavailable():
        pytest.skip(f"bench network needs network namespaces: {why_unavailable()}")
    r = smoke("network", tmp_path, timeout=420)["results"]
    assert list(r) == ["unshaped", "40 Mbit/s"]
    fast, slow = r["unshaped"], r["40 Mbit/s"]
    assert fast["runs"][0]["extra"]["split_source"] == "trace" == slow["runs"][0]["extra"]["split_source"]
    # ~1.8 MB of gradients per step: at 40 Mbit/s each all-reduce takes ~0.4 s, ~10x the unshaped one.
    assert slow["transfer_s_ms"] > 5 * fast["transfer_s_ms"] and slow["largest_term"] == "transfer"
    assert slow["runs"][0]["extra"]["links"] == "host0 40 Mbit/s, host1 40 Mbit/s"
    assert "network between the workers sets the pace" in slow["runs"][0]["extra"]["network_sentence"]


@pytest.mark.timeout(960)
def test_whatif_smoke(tmp_path: Path) -> None:
    r = smoke("whatif", tmp_path, timeout=900)["results"]
    row = r["rows"][0]
    assert row["cluster"] == "2w 1.5/0.5" and row["what"] == "equal workers" and row["split_source"] == "trace"
    assert len(r["rows"]) == 1, "--smoke runs no placement what-if (test_compare's --verify runs one)"
    for x in r["rows"]:
        assert positive({"n": 1, "failed": 0, "min": x["measured_epoch_s"], "median": x["measured_epoch_s"],
                         "max": x["measured_epoch_s"]}) > 0
        predicted = x["prediction"]["predicted_epoch_s"]
        assert x["error_ratio"] == (predicted - x["measured_epoch_s"]) / x["measured_epoch_s"]
    assert r["rows_measured"] == len(r["rows"]) and r["meets_target"] in (True, False)
    assert r["abs_error_max"] == max(abs(x["error_ratio"]) for x in r["rows"])
    # one repeat: each cluster's what-if is its one run, and the verification traced its first epoch only
    assert ([(s["what"], s["per_run_errors"]) for s in r["summary"]]
            == [(x["what"], [x["error_ratio"]]) for x in r["rows"]])

    from perfkit.analysis.verify import verification_window_of

    spec = json.loads((Path(row["check"]["run_dir"]) / "run.json").read_text())["profile"]["spec"]
    assert spec == verification_window_of(Path(row["unequal"]["run_dir"])) != "off"
