"""ParameterServerStrategy without training: cluster tasks and TF_CONFIG, flags, the step table of a
chief, the mode comparison and its verdict."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from perfkit.analysis.modes import mode_table
from perfkit.analysis.verdict import mode_lines
from perfkit.cli import main
from perfkit.cluster import check_mode, cluster_from_dict, load_cluster, local_cluster
from perfkit.errors import UsageError
from perfkit.profiler.steps import StepLog
from tests import clusters

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_blog_ps_cluster_numbers_workers_first_then_ps_then_the_chief() -> None:
    spec = load_cluster(EXAMPLES / "blog-cluster-ps.toml")
    tasks = [(t.index, t.role, t.task_index, t.host, t.port) for t in spec.tasks]
    assert tasks == [(0, "worker", 0, "tensor101", 20000), (1, "worker", 1, "tensor101", 20001),
                     (2, "worker", 2, "tensor101", 20002), (3, "worker", 3, "tensor102", 20000),
                     (4, "ps", 0, "tensor101", 20003), (5, "chief", 0, "tensor101", 20004)]
    assert spec.num_workers == 4 and spec.num_ps == 1 and spec.is_ps and spec.chief.index == 5
    cfg = spec.tf_config(4)
    assert cfg["task"] == {"type": "ps", "index": 0}
    assert cfg["cluster"] == {"worker": ["127.0.0.1:20000", "127.0.0.1:20001", "127.0.0.1:20002", "127.0.0.2:20000"],
                              "ps": ["127.0.0.1:20003"], "chief": ["127.0.0.1:20004"]}
    assert cluster_from_dict(spec.to_dict()) == spec
    check_mode(spec, "ps", cores=2.0)
    with pytest.raises(UsageError, match="ps and chief are for --mode ps"):
        check_mode(spec, "multi")
    only = spec.workers_only()
    assert not only.is_ps and [t.endpoint for t in only.tasks] == cfg["cluster"]["worker"]


def test_a_multi_workers_tf_config_is_unchanged_by_roles() -> None:
    spec = load_cluster(EXAMPLES / "blog-cluster.toml")
    assert spec.tasks == spec.workers and not spec.is_ps
    assert spec.tf_config(3) == {"cluster": {"worker": [w.endpoint for w in spec.workers]},
                                 "task": {"type": "worker", "index": 3}}


def test_a_local_ps_cluster_has_its_parameter_servers_and_a_chief() -> None:
    spec = local_cluster(2, 2.0, ps=2)
    assert [t.role for t in spec.tasks] == ["worker", "worker", "ps", "ps", "chief"]
    assert len({t.port for t in spec.tasks}) == 5
    assert not local_cluster(2, 2.0).is_ps


@pytest.mark.parametrize(("text", "message"), [
    ("workers = 1\nps = -1", "ps: -1 must be an integer >= 0"),
    ("workers = 1\nchief = 1", "chief: 1 must be true or false"),
    ("workers = 0", "workers: 0 must be an integer >= 1 (or the host runs ps or the chief)"),
])
def test_bad_ps_keys_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    clusters.write(path, clusters.host("a", cores=2, workers=None, extra=f"{text}\n"))
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_cluster(path)


def test_two_chiefs_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    clusters.write(path, *(clusters.host(n, f"127.0.0.{i}", 2, ps=1, chief=True) for n, i in (("a", 1), ("b", 2))))
    with pytest.raises(UsageError, match="chief = true on hosts a, b; a cluster has one chief"):
        load_cluster(path)


@pytest.mark.parametrize(("args", "message"), [
    (["run", "--mode", "multi", "--workers", "2", "--ps", "1"], "--ps: only with --mode ps"),
    (["run", "--mode", "ps", "--workers", "2", "--profile-steps", "3-5"], "--mode ps records no trace window"),
    (["run", "--mode", "ps", "--workers", "2", "--max-restarts", "1"], "--mode ps does not restart"),
    (["run", "--mode", "ps", "--workers", "2", "--ps", "0"], "--ps: must be at least 1"),
    (["run", "--mode", "ps"], "--mode ps: give either --workers N or --cluster FILE"),
    (["compare", "--modes", "multi,ps"], "--modes: 'multi,ps' must list single"),
    (["compare", "--modes", "single,sync"], "--modes: 'single,sync' must list single"),
    (["compare", "--ps", "2"], "--ps: only with ps in --modes"),
    (["compare", "--modes", "single,ps", "--verify"], "--verify: verifies the multi run's what-if"),
    (["launch", "--mode", "ps", "--", "python", "-c", "pass"], "--mode ps: give either --workers N or --cluster FILE"),
    (["launch", "--mode", "ps", "--workers", "2", "--ps", "0", "--", "python", "-c", "pass"],
     "--ps: must be at least 1"),
    (["launch", "--mode", "multi", "--workers", "2", "--ps", "1", "--", "python", "-c", "pass"],
     "--ps: only with --mode ps"),
    (["launch", "--mode", "ps", "--workers", "2", "--max-restarts", "1", "--", "python", "-c", "pass"],
     "--mode ps does not restart"),
    (["launch", "--mode", "ps", "--workers", "2", "--profile-steps", "2-3", "--", "python", "-c", "pass"],
     "--mode ps records no trace window"),
])
def test_ps_flags_are_checked_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   args: list[str], message: str) -> None:
    code = main([*args, "--results-dir", str(tmp_path / "r")] if args[0] != "launch" else
                [args[0], "--results-dir", str(tmp_path / "r"), *args[1:]])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "r").exists()


def test_compare_runs_the_three_modes_in_order_on_one_cluster_file(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    import perfkit.cli.compare as run_cli
    import perfkit.trainer.hosts.hostenv as hostenv

    seen: list[Any] = []

    def fake_train_once(cfg: Any, opts: Any, results_dir: Path, run_id: Any, quiet: bool) -> Path:
        seen.append((cfg.mode.value, cfg.profile_steps, opts))
        if len(seen) == 3:
            raise KeyboardInterrupt
        return results_dir / cfg.mode.value

    monkeypatch.setattr(run_cli, "train_once", fake_train_once)
    monkeypatch.setattr(hostenv, "preflight", lambda opts: None)
    main(["compare", "--preset", "tiny", "--cluster", str(EXAMPLES / "blog-cluster-ps.toml"), "--modes",
          "ps,single,multi", "--results-dir", str(tmp_path), "--quiet"])
    assert [(m, p) for m, p, _ in seen] == [("single", "auto"), ("multi", "auto"), ("ps", "off")]
    multi, ps = seen[1][2], seen[2][2]
    assert not multi.cluster.is_ps and multi.cluster.num_workers == 4 and len(multi.local_workers) == 4
    assert ps.cluster.num_ps == 1 and len(ps.local_workers) == 6


def test_a_chiefs_epoch_without_step_callbacks_ends_training_where_validation_begins() -> None:
    clock = iter([1_000_000_000, 6_000_000_000, 7_000_000_000, 8_000_000_000])
    log = StepLog(samples_per_step=1024, clock=lambda: next(clock))
    log.epoch_begin(0)
    log.validation_begin()
    log.validation_end()
    row = log.epoch_end(0, {"val_accuracy": 0.9})
    assert row["train_s"] == 5.0 and row["val_s"] == 1.0
    log.add_step(0, 0, 1_000, 2_000)
    frame = log.steps_frame()
    assert frame[["epoch", "step", "t_start_ns", "t_end_ns", "samples"]].values.tolist() == [[0, 0, 1000, 2000, 1024]]


def _runs(ps_epoch: float, ps_acc: float) -> pd.DataFrame:
    rows = [("base", "single", 10.0, 0.98, 1.0), ("sync", "multi", 8.0, 0.97, 1.25), ("verify", "multi", 5.0, 0.9, 2.0),
            ("async", "ps", ps_epoch, ps_acc, 10.0 / ps_epoch)]
    return pd.DataFrame([{"run_id": r, "mode": m, "strategy": None, "workers": 4, "ps": 1 if m == "ps" else 0,
                          "steady_epoch_s": e, "steady_samples_per_s": 1.0, "speedup": s, "efficiency": s / 4,
                          "step_shares": None, "min_step_share": math.nan, "val_accuracy": a, "val_auc": a,
                          "val_accuracy_gap": a - 0.98} for r, m, e, a, s in rows])


def test_the_mode_table_sets_async_against_sync_and_leaves_verifications_out() -> None:
    modes = mode_table(_runs(4.0, 0.95), frozenset({"verify"}))
    assert modes["run_id"].tolist() == ["base", "sync", "async"]
    ps = modes[modes["mode"] == "ps"].iloc[0]
    assert ps["epoch_ratio_vs_multi"] == 2.0 and ps["val_accuracy_vs_multi"] == pytest.approx(-0.02)


@pytest.mark.parametrize(("epoch", "acc", "says"), [
    (4.0, 0.95, "Asynchronous training beat synchronous by 100% per epoch at an accuracy cost of 0.0200"),
    (4.0, 0.975, "beat synchronous by 100% per epoch with no accuracy cost"),
    (8.2, 0.97, "Neither beat the other by more than 5% per epoch"),
    (10.0, 0.96, "Asynchronous training did not beat synchronous: its epochs took 25% longer, at an accuracy cost"),
])
def test_the_verdict_says_whether_async_beat_sync_and_at_what_cost(epoch: float, acc: float, says: str) -> None:
    lines = mode_lines(mode_table(_runs(epoch, acc), frozenset({"verify"})))
    assert len(lines) == 1 and says in lines[0], lines
    assert "async (ps, ParameterServerStrategy)" in lines[0] and "sync (multi" in lines[0]


def test_no_mode_sentence_without_both_sync_and_async_runs() -> None:
    runs = _runs(4.0, 0.95)
    assert mode_lines(mode_table(runs[runs["mode"] != "ps"])) == []
