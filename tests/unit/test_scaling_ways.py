"""The three ways to scale side by side (``perfkit sweep --ways``, ``perfkit run --replicas N``): flags and
bad input, the plan and its run order, the sweep record, and the analysis of a hand-made sweep with ways."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from perfkit.analysis.scaling.forecast import forecast
from perfkit.analysis.scaling.study import (
    BASELINE,
    POINT,
    RUN_COLUMNS,
    ScalingStudy,
    SweepRecord,
    load_sweep,
    point_table,
)
from perfkit.analysis.scaling.ways import notes, way_figures
from perfkit.config import Mode, RunConfig
from perfkit.errors import UsageError
from perfkit.studies.sweep import config_for, emulated_cluster, options_for, parse_ways, plan, sweep


def _cfg(**kw: object) -> RunConfig:
    return RunConfig.from_preset(Mode.multi, "tiny", **kw)  # batch 256, 2048/512 players


# -- perfkit run --replicas ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, replicas, words", [
    (Mode.single, 0, "integer >= 1"), (Mode.multi, 2, "only with --mode single"), (Mode.ps, 2, "only with --mode"),
    (Mode.single, 3, "does not divide among 3 replicas")])
def test_bad_replicas_are_one_line_errors(mode: Mode, replicas: int, words: str) -> None:
    with pytest.raises(UsageError, match=words) as e:
        RunConfig.from_preset(mode, "tiny", replicas=replicas)
    assert str(e.value).startswith("--replicas") and "\n" not in str(e.value)


def test_replicas_default_to_one_and_round_trip() -> None:
    assert RunConfig.from_preset(Mode.single, "tiny").replicas == 1
    cfg = RunConfig.from_preset(Mode.single, "tiny", replicas=4)
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    old = {k: v for k, v in cfg.to_dict().items() if k != "replicas"}  # a run.json from before --replicas
    assert RunConfig.from_dict(old).replicas == 1


def test_bad_replicas_through_the_cli_run_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.cli import main

    for args in (["--replicas", "0"], ["--mode", "multi", "--workers", "2", "--replicas", "2"], ["--replicas", "3"]):
        assert main(["run", "--preset", "tiny", "--results-dir", str(tmp_path / "r"), *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("perfkit: error: --replicas") and "\n" not in err
    assert not (tmp_path / "r").exists()


# -- perfkit sweep --ways: the plan ----------------------------------------------------------------------

def test_ways_parse_in_a_fixed_order_and_bad_ones_name_the_choices() -> None:
    assert parse_ways("ps, replicas,workers") == ("replicas", "workers", "ps")
    for text in ("gpus", "workers,workers", ""):
        with pytest.raises(UsageError) as e:
            parse_ways(text)
        assert str(e.value).startswith("--ways") and "replicas, workers, ps" in str(e.value)
        assert "\n" not in str(e.value)


def test_the_plan_interleaves_every_way_and_runs_one_replica_once() -> None:
    p = plan(_cfg(), "1,2", 1, "strong", None, ways="replicas,workers,ps")
    assert p.order() == [(None, None), (1, "workers"), (1, "ps"), (2, "replicas"), (2, "workers"), (2, "ps")]
    assert plan(_cfg(), "1,2", 1, "strong", None).order() == [(None, None), (1, "workers"), (2, "workers")]


def test_each_way_has_its_configuration_and_cluster() -> None:
    cfg = _cfg()
    strong = plan(cfg, "1,2", 1, "strong", None, ways="replicas,workers,ps")
    weak = plan(cfg, "1,2", 1, "weak", None, ways="replicas,workers,ps")
    rep = config_for(cfg, strong, 2, "replicas")
    assert (rep.mode, rep.replicas, rep.batch_size) == (Mode.single, 2, 256)
    assert config_for(cfg, weak, 2, "replicas").batch_size == 512
    ps = config_for(cfg, weak, 2, "ps")  # a ps worker takes a whole batch a step: weak keeps it
    assert (ps.mode, ps.batch_size, ps.profile_steps, ps.replicas) == (Mode.ps, 256, "off", 1)
    assert options_for(strong, 2, False, False, "replicas") is None
    opts = options_for(strong, 2, False, False, "ps")
    assert opts is not None and opts.cluster.num_workers == 2 and opts.cluster.num_ps == 1
    assert opts.cluster.chief is not None  # the chief is a process of its own, not one of the N workers


def test_a_scale_model_puts_ps_on_the_first_host_and_refuses_replicas() -> None:
    with pytest.raises(UsageError, match="--ways replicas: not with --cores-per-worker") as e:
        plan(_cfg(), "1,2", 1, "strong", 0.5, machine_cores=2.0, ways="replicas,workers")
    assert "\n" not in str(e.value)
    p = plan(_cfg(), "2", 1, "strong", 0.5, machine_cores=2.0, ways="ps")
    assert p.order() == [(1, "workers"), (1, "ps"), (2, "ps")]  # one host of C cores: the reference, always
    spec = emulated_cluster(2, 0.5, ps=True)
    assert [(h.workers, h.ps, h.chief, h.cores) for h in spec.hosts] == [(1, 1, True, 0.5), (1, 0, False, 0.5)]


def test_a_strong_count_must_divide_the_batch_for_replicas_but_not_for_ps() -> None:
    with pytest.raises(UsageError, match="among 3 replicas"):
        plan(_cfg(), "1,3", 1, "strong", None, ways="replicas")
    assert plan(_cfg(), "1,3", 1, "strong", None, ways="ps").ways == ("ps",)


def test_bad_ways_through_the_cli_run_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.cli import main

    for args in (["--ways", "threads"], ["--ways", "replicas", "--cores-per-worker", "0.5"]):
        assert main(["sweep", "--workers", "1,2", "--preset", "tiny", "--results-dir", str(tmp_path / "r"),
                     *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("perfkit: error: --ways") and "\n" not in err
    assert not (tmp_path / "r").exists()


# -- the sweep loop and its record -----------------------------------------------------------------------

def test_the_sweep_records_each_runs_way_and_splits_the_cpu_once(tmp_path: Path) -> None:
    cfg, calls, splits = _cfg(), [], []

    def train(c: RunConfig, opts: object, run_id: str) -> Path:
        calls.append((run_id.rsplit("-", 1)[1], c.mode.value, c.replicas, opts is None))
        (tmp_path / run_id).mkdir()
        return tmp_path / run_id

    def options(n: int, way: str) -> object:
        return SimpleNamespace(cluster=SimpleNamespace(num_workers=n), way=way)

    p = plan(cfg, "1,2,4", 1, "strong", None, ways="replicas,ps")
    d = sweep(cfg, p, tmp_path, train, options, lambda s: None, "T0", split_cpu=splits.append)
    assert splits == [4]  # the largest replica count, before the first run
    assert calls == [("base", "single", 1, True), ("ps1", "ps", 1, False), ("replicas2", "single", 2, True),
                     ("ps2", "ps", 1, False), ("replicas4", "single", 4, True), ("ps4", "ps", 1, False)]
    rec = load_sweep(d)
    assert rec.ways == ("replicas", "ps") and rec.runs[0].way is None and rec.runs[0].role == BASELINE
    assert [(r.way, r.workers) for r in rec.runs[1:3]] == [("ps", 1), ("replicas", 2)]


def test_a_sweep_json_from_before_ways_reads_as_workers(tmp_path: Path) -> None:
    old = {"sweep_id": "s", "counts": [1, 2], "repeats": 1, "scaling": "strong", "cores_per_worker": None,
           "preset": "tiny", "batch_size": 256, "reference": BASELINE, "started": "now", "status": "complete",
           "runs": [{"run_id": "a", "round": 1, "role": POINT, "workers": 2, "status": "complete"}]}
    (tmp_path / "sweep.json").write_text(json.dumps(old))
    rec = load_sweep(tmp_path)
    assert rec.ways == ("workers",) and rec.runs[0].way is None and rec.runs[0].kind == "workers"


# -- the analysis ----------------------------------------------------------------------------------------

def _analysis(run_id: str, procs: list[tuple[int, str, float]]) -> SimpleNamespace:
    rows = [{"run_id": run_id, "worker": w, "role": role, "rss_peak_bytes": rss} for w, role, rss in procs]
    return SimpleNamespace(processes=pd.DataFrame(rows))


def _meta(*gradients_s: float | None) -> SimpleNamespace:
    return SimpleNamespace(workers=[SimpleNamespace(calibration=None if g is None else {"gradients_s": g})
                                    for g in gradients_s])


def test_memory_per_replica_and_sync_cost_of_each_way() -> None:
    mib = 2**20
    rep = way_figures(_analysis("r", [(-1, "launcher", 50 * mib), (0, "trainer", 900 * mib)]), "r", _meta(0.012),
                      "replicas", 2)
    assert rep == {"replicas_per_process": 2, "processes": 1, "memory_per_replica_bytes": 450 * mib, "sync_s": 0.012}
    wk = way_figures(_analysis("w", [(-1, "launcher", 50 * mib), (0, "worker", 600 * mib), (1, "worker", 700 * mib)]),
                     "w", _meta(0.03, 0.05), "workers", 2)
    assert wk["memory_per_replica_bytes"] == 650 * mib and wk["sync_s"] == pytest.approx(0.04)
    ps = way_figures(_analysis("p", [(0, "worker", 400 * mib), (1, "worker", 400 * mib), (2, "ps", 200 * mib),
                                     (3, "chief", 900 * mib)]), "p", _meta(None, None, None, None), "ps", 2)
    assert ps["processes"] == 3 and ps["memory_per_replica_bytes"] == 500 * mib  # the chief is not counted
    assert math.isnan(ps["sync_s"])
    alone = way_figures(_analysis("q", [(0, "worker", 400 * mib), (1, "ps", 200 * mib)]), "q", _meta(None, None),
                        "ps", 1)
    assert math.isnan(alone["sync_s"])  # a ps worker alone still pushes through the ps: not "no sync"
    base = way_figures(_analysis("b", [(0, "trainer", 800 * mib)]), "b", _meta(None), None, 1)
    assert base["sync_s"] == 0.0 and base["memory_per_replica_bytes"] == 800 * mib


def _runs() -> pd.DataFrame:
    """A sweep of 1, 2 with every way; the baseline runs at 10 s an epoch."""
    rows = []
    for run_id, role, way, n, epoch, sync in (("b", BASELINE, None, 1, 10.0, 0.0),
                                             ("w1", POINT, "workers", 1, 11.0, 0.0),
                                             ("p1", POINT, "ps", 1, 12.0, math.nan),
                                             ("r2", POINT, "replicas", 2, 8.0, 0.012),
                                             ("w2", POINT, "workers", 2, 7.0, 0.04),
                                             ("p2", POINT, "ps", 2, 9.0, math.nan)):
        rows.append({"run_id": run_id, "round": 1, "role": role, "way": way, "workers": n, "global_batch": 256,
                     "per_worker_batch": 256 / n, "steps": 8, "steady_epoch_s": epoch, "train_s": epoch - 1,
                     "val_s": 1.0, "epoch_samples": 2048, "step_s": (epoch - 1) / 8, "compute_s": (epoch - 1) / 8,
                     "transfer_s": 0.0, "wait_s": 0.0, "input_s": math.nan, "split_source": None,
                     "cpu_s_per_1k_samples": 1.0, "rss_peak_max_bytes": 8e8, "replicas_per_process": 1,
                     "processes": n, "memory_per_replica_bytes": 4e8, "sync_s": sync, "rate": 2048 / epoch,
                     "speedup": 10.0 / epoch, "clean_step_s": (epoch - 1) / 8, "clean_val_s": 1.0})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def _record() -> SweepRecord:
    return SweepRecord("sweep-ways", (1, 2), 1, "strong", None, "tiny", 256, BASELINE, "now",
                       status="complete", gradient_bytes=1.8e6, ways=("replicas", "workers", "ps"))


def test_points_are_per_way_and_the_forecast_is_the_workers_ways() -> None:
    runs = _runs()
    p = point_table(runs, _record())
    assert p["point"].tolist() == ["baseline (single process)", "2 replicas (one process)", "1 worker", "2 workers",
                                   "1 worker + 1 ps", "2 workers + 1 ps"]
    two = p.set_index("point")
    assert two.loc["2 replicas (one process)", "speedup"] == pytest.approx(1.25)
    assert two.loc["2 workers + 1 ps", "efficiency"] == pytest.approx(10 / 9 / 2)
    assert two.loc["2 replicas (one process)", "sync_s"] == 0.012
    fc, _, _ = forecast(runs, _record(), [1, 2, 4])
    measured = fc[fc["measured"]].set_index("workers")["measured_epoch_s"]
    assert measured.to_dict() == {1: 11.0, 2: 7.0}  # the workers way's own epochs, not replicas' or ps'
    assert any("workers way only" in n for n in notes(_record().ways)) and not notes(("workers",))


def test_the_renderers_show_every_way() -> None:
    from perfkit.analysis.renderers import scaling_console, scaling_html, scaling_json

    runs = _runs()
    fc, terms, fc_notes = forecast(runs, _record(), [1, 2, 4])
    s = ScalingStudy(_record(), runs, point_table(runs, _record()), fc, terms, tuple(fc_notes))
    out = io.StringIO()
    scaling_console.render(s, out)
    text = out.getvalue()
    assert "2 replicas (one process)" in text and "2 workers + 1 ps" in text and "Memory and synchronisation" in text
    assert "Forecast of the workers way" in text and "12.0" in text  # the replicas' sync, in ms
    doc = scaling_json.document(s)
    assert {p["way"] for p in doc["points"]} == {None, "replicas", "workers", "ps"}
    assert doc["sweep"]["ways"] == ["replicas", "workers", "ps"]
    ps = next(p for p in doc["points"] if p["point"] == "2 workers + 1 ps")
    assert ps["sync_s"] is None and ps["memory_per_replica_bytes"] == 4e8
    fig = scaling_html.speedup_figure(s)
    lines = [d["name"] for d in fig["data"] if d.get("mode") == "lines+markers"]
    assert len(lines) == 3 and any(n.startswith("replicas in one process") for n in lines)
    replicas = next(d for d in fig["data"] if d["name"].startswith("replicas"))
    assert replicas["x"] == [1, 2]  # the line starts at the baseline: one replica is the baseline itself
    assert scaling_html.page(s).count('class="plotly-graph-div"') == 5


def test_a_replicas_run_is_never_picked_as_the_baseline() -> None:
    from perfkit.analysis.select import one_replica

    assert one_replica(SimpleNamespace(config={})) and one_replica(SimpleNamespace(config={"replicas": 1}))
    assert not one_replica(SimpleNamespace(config={"replicas": 2}))
