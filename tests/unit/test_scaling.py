"""perfkit sweep's plan and bad input, the sweep loop (with a stand-in for training), and the sweep record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfkit.analysis.scaling.study import BASELINE, POINT, PROBE, SweepRecord, SweepRun, load_sweep
from perfkit.config import Mode, RunConfig
from perfkit.errors import ResultsError, RunFailed, UsageError
from perfkit.studies.sweep import PROBE_STEPS, config_for, emulated_cluster, options_for, parse_counts, plan, sweep


def _cfg(**kw: object) -> RunConfig:
    return RunConfig.from_preset(Mode.multi, "tiny", **kw)  # batch 256, 2048/512 players


@pytest.mark.parametrize("text, words", [("1,x", "whole numbers"), ("1.5,2", "whole numbers"), ("", "whole numbers"),
                                         ("0,2", "at least 1"), ("2,2", "more than once")])
def test_bad_counts_are_one_line_errors(text: str, words: str) -> None:
    with pytest.raises(UsageError, match=words) as e:
        parse_counts(text)
    assert "\n" not in str(e.value)


def test_counts_are_sorted() -> None:
    assert parse_counts("4, 1,2") == (1, 2, 4)


def test_plan_refuses_what_cannot_run() -> None:
    with pytest.raises(UsageError, match="does not divide among 3"):
        plan(_cfg(), "1,3", 1, "strong", None)
    with pytest.raises(UsageError, match="--repeats"):
        plan(_cfg(), "1,2", 0, "strong", None)
    with pytest.raises(UsageError, match="more than this machine's 2"):
        plan(_cfg(), "1,2,4", 1, "strong", 1.0, machine_cores=2.0)
    with pytest.raises(UsageError, match="--scaling"):
        plan(_cfg(), "1,2", 1, "linear", None)
    with pytest.raises(UsageError, match="weak, 4 workers"):  # 256 x 4 > the 512 validation sequences
        plan(_cfg(), "1,4", 1, "weak", None)
    with pytest.raises(UsageError, match="> 0"):
        plan(_cfg(), "1,2", 1, "strong", 0.0, machine_cores=2.0)


def test_a_scale_model_always_runs_one_host_and_fits_the_machine() -> None:
    p = plan(_cfg(), "2,4", 1, "strong", 0.5, machine_cores=2.0)
    assert p.counts == (1, 2, 4) and p.reference == POINT
    spec = emulated_cluster(4, 0.5)
    assert spec.num_workers == 4 and {h.cores for h in spec.hosts} == {0.5}
    assert len({h.address for h in spec.hosts}) == 4  # four hosts, not four workers on one
    assert plan(_cfg(), "1,2", 1, "strong", None).reference == BASELINE


def test_strong_keeps_the_global_batch_weak_the_per_worker_batch() -> None:
    cfg = _cfg()
    strong, weak = plan(cfg, "1,2", 1, "strong", None), plan(cfg, "1,2", 1, "weak", None)
    assert config_for(cfg, strong, 2).batch_size == cfg.batch_size
    assert config_for(cfg, weak, 2).batch_size == 2 * cfg.batch_size
    assert config_for(cfg, strong, None).mode is Mode.single and config_for(cfg, strong, 2).mode is Mode.multi


def test_a_strong_scale_model_probes_one_worker_at_each_run_and_forecast_counts_share(tmp_path: Path) -> None:
    cfg = _cfg()  # batch 256
    p = plan(cfg, "2,4", 1, "strong", 0.25, machine_cores=2.0, targets=(8, 16, 3))
    assert p.probes == (1, 2, 4, 8, 16)  # 3 does not divide 256: no probe, its forecast says so
    assert p.order()[-5:] == [(n, PROBE) for n in (1, 2, 4, 8, 16)]
    probe = config_for(cfg, p, 8, PROBE)
    assert (probe.mode, probe.batch_size, probe.epochs, probe.profile_steps) == (Mode.multi, 32, 2, "off")
    assert (probe.params["train_players"], probe.params["test_players"]) == (32 * PROBE_STEPS, 32)
    assert options_for(p, 8, True, False, PROBE).cluster.num_workers == 1  # one host of the scale model
    for other in (plan(cfg, "1,2", 1, "weak", 0.25, machine_cores=2.0, targets=(4,)),
                  plan(cfg, "1,2", 1, "strong", None, targets=(4,))):
        assert other.probes == ()  # weak: one per-worker batch; local workers: one alone is not as each runs
    train = _FakeTrain(tmp_path)
    d = sweep(cfg, plan(cfg, "1,2", 1, "strong", 0.5, machine_cores=2.0, targets=(4,)), tmp_path, train,
              lambda n, way: options_for(p, n, True, False, way), lambda s: None, "T9")
    assert [(c[0].rsplit("-", 1)[1], c[2], c[3]) for c in train.calls] == [
        ("n1", 256, 1), ("n2", 256, 2), ("probe1", 256, 1), ("probe2", 128, 1), ("probe4", 64, 1)]
    assert [(r.role, r.workers, r.way) for r in load_sweep(d).runs][2:] == [(PROBE, n, None) for n in (1, 2, 4)]


def test_bad_input_through_the_cli_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.cli import main

    for args in (["--workers", "1,3"], ["--workers", "0,1"], ["--workers", "1,two"], ["--workers", "1,2", "--repeats",
                 "0"], ["--workers", "1,2,4", "--cores-per-worker", "64"]):
        assert main(["sweep", "--preset", "tiny", "--results-dir", str(tmp_path / "r"), *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("perfkit: error: ") and "\n" not in err
    assert not (tmp_path / "r").exists()


class _FakeTrain:
    """Stands in for training: records what it was asked, fails or is interrupted on request."""

    def __init__(self, root: Path, fail: str = "", stop: str = "") -> None:
        self.root, self.fail, self.stop, self.calls = root, fail, stop, []

    def __call__(self, cfg: RunConfig, opts: object, run_id: str) -> Path:
        self.calls.append((run_id, cfg.mode.value, cfg.batch_size, None if opts is None else opts.cluster.num_workers))
        if self.fail and run_id.endswith(self.fail):
            raise RunFailed(f"run {run_id} failed: boom\nsecond line")
        if self.stop and run_id.endswith(self.stop):
            raise KeyboardInterrupt
        (self.root / run_id).mkdir(parents=True)
        return self.root / run_id


def _options(n: int, way: str = "workers") -> object:
    from types import SimpleNamespace

    return SimpleNamespace(cluster=SimpleNamespace(num_workers=n))


def test_repeats_interleave_and_a_failed_run_is_recorded(tmp_path: Path) -> None:
    cfg = _cfg()
    train = _FakeTrain(tmp_path, fail="r1-n2")
    d = sweep(cfg, plan(cfg, "1,2", 2, "strong", None), tmp_path, train, _options, lambda s: None, "T0")
    order = [(c[0].rsplit("-", 1)[1], c[3]) for c in train.calls]
    assert order == [("base", None), ("n1", 1), ("n2", 2), ("n1", 1), ("n2", 2), ("base", None)]  # turned
    rec = load_sweep(d)
    assert rec.status == "complete" and [r.status for r in rec.runs].count("failed") == 1
    failed = next(r for r in rec.runs if r.status == "failed")
    assert failed.workers == 2 and failed.round == 1 and failed.error == "run T0-multi-sweep-r1-n2 failed: boom"


def test_an_interrupted_sweep_keeps_its_finished_runs(tmp_path: Path) -> None:
    cfg = _cfg()
    with pytest.raises(KeyboardInterrupt):
        sweep(cfg, plan(cfg, "1,2,4", 1, "strong", None), tmp_path, _FakeTrain(tmp_path, stop="n2"), _options,
              lambda s: None, "T1")
    rec = load_sweep(tmp_path / "sweep-T1")
    assert rec.status == "interrupted"
    assert [(r.workers, r.status) for r in rec.runs] == [(1, "complete"), (1, "complete"), (2, "interrupted")]
    assert [r.role for r in rec.runs] == [BASELINE, POINT, POINT]


def test_the_record_round_trips_and_replaces_a_run(tmp_path: Path) -> None:
    rec = SweepRecord("s", (1, 2), 1, "strong", None, "tiny", 256, BASELINE, "now")
    rec = rec.with_run(SweepRun("a", 1, POINT, 1)).with_run(SweepRun("b", 1, POINT, 2))
    rec = rec.with_run(SweepRun("a", 1, POINT, 1, status="complete"))
    assert [(r.run_id, r.status) for r in rec.runs] == [("a", "complete"), ("b", "running")]
    rec.save(tmp_path)
    assert load_sweep(tmp_path) == rec
    assert json.loads((tmp_path / "sweep.json").read_text())["counts"] == [1, 2]
    with pytest.raises(ResultsError, match="not a sweep directory"):
        load_sweep(tmp_path / "nothing")


def test_an_unreadable_probe_is_named_and_left_out(tmp_path: Path) -> None:
    from perfkit.analysis.scaling.study import _probe_rows, run_table

    (tmp_path / "T-probe2").mkdir()
    (tmp_path / "T-probe2" / "run.json").write_text("{not json")
    record = SweepRecord("sweep-T", (1, 2), 1, "strong", 0.5, "tiny", 256, POINT, "2026-01-01T00:00:00Z",
                         runs=(SweepRun("T-probe2", 1, PROBE, 2, status="complete"),))
    runs, notes = run_table(record, tmp_path)
    assert runs.empty and notes == ["no complete run in the sweep yet"]  # probes alone are no curve
    said: list[str] = []
    assert _probe_rows(list(record.runs), tmp_path, said) == []
    assert len(said) == 1 and said[0].startswith("T-probe2 (a probe at the batch of 2) left out: ")
