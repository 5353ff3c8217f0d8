"""The scaling analysis on hand-made runs with known answers: points, the forecast's fit, the renderers."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest

from perfkit.analysis.scaling.forecast import forecast, leave_one_out
from perfkit.analysis.scaling.model import Machine, StepModel, fit, lstsq
from perfkit.analysis.scaling.study import BASELINE, POINT, PROBE, RUN_COLUMNS, ScalingStudy, SweepRecord, point_table

MACHINE = Machine(cores_per_worker=0.25, machine_cores=2.0, other_cores=0.2)
TRUE = StepModel(c0=0.01, c1=0.25, lam=0.02, omega=0.003, v0=0.3, v1=0.5, strong=True, machine=MACHINE,
                 val_steps=4)
BATCH, SAMPLES = 1024, 60 * 1024


def _runs(model: StepModel, counts: tuple[int, ...], rounds: int = 2, noise: float = 0.0) -> pd.DataFrame:
    """RUN_COLUMNS rows as the model says each count runs (``noise``: a relative wobble per round)."""
    rows = []
    for r in range(1, rounds + 1):
        wobble = 1 + noise * (1 if r % 2 else -1)
        for n in counts:
            steps = SAMPLES // BATCH
            t = {k: v * wobble for k, v in model.terms(n).items()}
            val = model.val(n) * wobble
            epoch = steps * sum(t.values()) + val
            rows.append({"run_id": f"r{r}n{n}", "round": r, "role": POINT, "workers": n, "global_batch": BATCH,
                         "per_worker_batch": BATCH / n, "steps": steps, "steady_epoch_s": epoch,
                         "train_s": epoch - val, "val_s": val, "epoch_samples": steps * BATCH,
                         "step_s": sum(t.values()), **t, "input_s": math.nan, "split_source": "trace",
                         "cpu_s_per_1k_samples": 1.0 + n, "rss_peak_max_bytes": 1e8, "rate": steps * BATCH / epoch,
                         "speedup": math.nan, "clean_step_s": sum(t.values()), "clean_val_s": val,
                         "val_steps": model.val_steps, "machine_cores": MACHINE.machine_cores,
                         "other_cores": MACHINE.other_cores, "worker_cores": n * 0.25})
    runs = pd.DataFrame(rows, columns=RUN_COLUMNS)
    ref = runs.loc[runs["workers"] == 1, "rate"].mean()
    runs["speedup"] = runs["rate"] / ref
    return runs


def _record(counts: tuple[int, ...] = (1, 2, 4), status: str = "complete") -> SweepRecord:
    return SweepRecord("sweep-test", counts, 2, "strong", 0.25, "quick", BATCH, POINT, "2026-01-01T00:00:00Z",
                       status=status, gradient_bytes=1.8e6)


def test_nonnegative_least_squares_drops_a_negative_column() -> None:
    a = np.column_stack([np.ones(4), np.arange(4.0)])
    y = 5 - 1.0 * np.arange(4.0)  # a falling line: a negative slope is refused, the mean is the best fit left
    coef = lstsq(a, y, nonneg=(1,))
    assert coef[1] == 0 and coef[0] == pytest.approx(y.mean())
    assert lstsq(a, y) == pytest.approx([5, -1])


def test_a_worker_gets_its_budget_until_the_machine_runs_out() -> None:
    assert MACHINE.cores(4) == 0.25  # 4 x 0.25 + 0.2 = 1.2 of 2 cores: each its whole budget
    assert MACHINE.cores(8) == pytest.approx(0.25 / ((8 * 0.25 + 0.2) / 2.0))  # 2.2 cores asked of 2
    local = Machine(cores_per_worker=None, machine_cores=2.0, other_cores=0.2)
    assert local.cores(1) == pytest.approx(1.8) and local.cores(4) == pytest.approx(0.45)


def test_the_fit_recovers_a_model_and_predicts_beyond() -> None:
    runs = _runs(TRUE, (1, 2, 4, 8))
    from perfkit.analysis.scaling.forecast import fit_points

    m = fit(fit_points(runs), True, MACHINE, val_steps=4)
    assert m is not None
    for name in ("c0", "c1", "lam", "omega", "v0", "v1"):
        assert getattr(m, name) == pytest.approx(getattr(TRUE, name), rel=1e-6, abs=1e-12)
    fc, terms, _ = forecast(runs[runs["workers"] < 8], _record(), [8, 16])
    row8, row16 = (fc.set_index("workers").loc[n] for n in (8, 16))
    assert row8["steady_epoch_s"] == pytest.approx(TRUE.epoch(8, SAMPLES // BATCH), rel=1e-6) and row8["supported"]
    assert row16["steady_epoch_s"] == pytest.approx(TRUE.epoch(16, SAMPLES // BATCH), rel=1e-6)
    assert set(terms["formula"]) >= {"c0", "c1 * x", "lam * log2(N)", "omega * sqrt(2 ln N)", "C", "M", "L", "loo"}


# A worker's compute as measured on the 2-core machine: not smooth in its share of the batch (core-seconds a
# step of one worker at the batch share of N workers), and a part each of several workers pays beside it
ROUGH = StepModel(c0=0.0, c1=0.0, lam=0.02, omega=0.003, v0=0.3, v1=0.5, strong=True, machine=MACHINE, val_steps=4,
                  probes=((1, 0.235), (2, 0.125), (4, 0.092), (8, 0.038), (16, 0.02)), extra=0.02)


def _with_probes(runs: pd.DataFrame, model: StepModel, counts: tuple[int, ...]) -> pd.DataFrame:
    """The runs and, for each of ``counts`` and round, a probe: one worker at the count's share, its step
    all compute (seconds on one host's cores)."""
    probes = [{"run_id": f"r{r}p{n}", "round": r, "role": PROBE, "workers": n, "global_batch": BATCH // n,
               "per_worker_batch": BATCH // n, "clean_step_s": dict(model.probes)[n] / MACHINE.cores(1)}
              for r in (1, 2) for n in counts]
    return pd.concat([runs, pd.DataFrame(probes, columns=RUN_COLUMNS)], ignore_index=True)


def test_probes_forecast_a_compute_that_no_line_through_the_fitted_counts_reaches() -> None:
    runs = _runs(ROUGH, (1, 2, 4, 8))
    fitted = runs[runs["workers"] < 8]
    line, _, _ = forecast(fitted, _record(), [8])
    assert abs(line.iloc[0]["steady_epoch_s"] / ROUGH.epoch(8, SAMPLES // BATCH) - 1) > 0.1  # the line misses
    fc, terms, _ = forecast(_with_probes(fitted, ROUGH, (1, 2, 4, 8)), _record(), [8, 16])
    row8, row16 = (fc.set_index("workers").loc[n] for n in (8, 16))
    assert row8["steady_epoch_s"] == pytest.approx(ROUGH.epoch(8, SAMPLES // BATCH), rel=1e-6) and row8["supported"]
    assert row8["epoch_hi_s"] == pytest.approx(row8["epoch_lo_s"], rel=1e-6)  # every count left out: exact
    assert not row16["supported"] and "no probe ran" in row16["support_note"] and "--forecast 16" in \
        row16["support_note"]
    by = terms.set_index("formula")["value"]
    assert by["e"] == pytest.approx(0.02) and by["P(8)"] == pytest.approx(0.038) and "P(16)" not in by
    assert (terms["formula"] == "loo").sum() == 3 and terms.loc[terms["formula"] == "loo", "value"].abs().max() < 1e-9


def test_beyond_twice_the_largest_count_has_no_interval_and_says_why() -> None:
    fc, _, _ = forecast(_runs(TRUE, (1, 2, 4), noise=0.03), _record(), [8, 16])
    row8, row16 = (fc.set_index("workers").loc[n] for n in (8, 16))
    assert row8["supported"] and row8["epoch_lo_s"] < row8["steady_epoch_s"] < row8["epoch_hi_s"]
    assert not row16["supported"] and math.isnan(row16["epoch_lo_s"]) and math.isnan(row16["epoch_hi_s"])
    assert "beyond 2x the largest count run (4)" in row16["support_note"]


def test_the_interval_is_the_error_out_of_sample() -> None:
    """A model that predicts every left-out count exactly, on runs that repeat exactly, has a zero-width
    interval (four counts: each term keeps two counts to fit when one is left out); the same points with a
    repeat spread get an interval of t x that spread."""
    exact, _, _ = forecast(_runs(TRUE, (1, 2, 4, 8)), _record((1, 2, 4, 8)), [16])
    assert exact.iloc[0]["epoch_hi_s"] == pytest.approx(exact.iloc[0]["epoch_lo_s"], rel=1e-6)
    fc, terms, _ = forecast(_runs(TRUE, (1, 2, 4), noise=0.05), _record(), [8])
    sigma = float(terms.set_index("formula").loc["sigma", "value"])
    r = fc.iloc[0]
    assert sigma > 0 and r["epoch_hi_s"] / r["steady_epoch_s"] == pytest.approx(math.exp(2.920 * sigma), rel=1e-6)


def test_leave_one_out_predicts_each_count_from_the_others() -> None:
    from perfkit.analysis.scaling.forecast import _fitter, fit_points

    points = fit_points(_runs(TRUE, (1, 2, 4, 8)))
    held = leave_one_out(points, _fitter(True, 0.25, 4))
    assert held["workers"].tolist() == [1, 2, 4, 8]
    assert held.set_index("workers").loc[8, "fitted_on"] == "1, 2, 4"
    assert held["error"].abs().max() < 1e-6  # the model is the truth here


def test_two_counts_give_a_forecast_without_an_interval() -> None:
    fc, _, notes = forecast(_runs(TRUE, (1, 2)), _record((1, 2)), [4])
    assert not fc.iloc[0]["supported"] and math.isnan(fc.iloc[0]["epoch_lo_s"])
    assert "fewer than three counts" in fc.iloc[0]["support_note"] and any("two worker counts" in n for n in notes)


def test_points_give_speedup_spread_and_efficiency() -> None:
    runs = _runs(TRUE, (1, 2, 4), noise=0.05)
    p = point_table(runs, _record()).set_index("workers")
    for n in (2, 4):
        each = runs.loc[runs["workers"] == n, "speedup"]
        assert p.loc[n, "speedup"] == pytest.approx(each.mean())
        assert (p.loc[n, "speedup_lo"], p.loc[n, "speedup_hi"]) == (each.min(), each.max())
        assert p.loc[n, "efficiency"] == pytest.approx(each.mean() / n) and p.loc[n, "ideal_speedup"] == n
    assert p.loc[1, "transfer_s"] == 0 and p.loc[4, "transfer_s"] > p.loc[2, "transfer_s"]


def test_a_baseline_row_comes_first() -> None:
    runs = _runs(TRUE, (1, 2))
    base = runs[runs["workers"] == 1].assign(role=BASELINE, run_id=lambda d: d["run_id"] + "b")
    p = point_table(pd.concat([base, runs], ignore_index=True), _record())
    assert p["point"].tolist() == ["baseline (single process)", "1 worker", "2 workers"]


def test_one_count_gives_no_forecast_and_says_why() -> None:
    fc, terms, notes = forecast(_runs(TRUE, (1,)), _record((1,)), [2])
    assert fc.empty and terms.empty and any("at least two worker counts" in n for n in notes)


def _study() -> ScalingStudy:
    runs = _runs(TRUE, (1, 2, 4), noise=0.03)
    fc, terms, notes = forecast(runs, _record(), [1, 2, 4, 8, 16])
    return ScalingStudy(_record(), runs, point_table(runs, _record()), fc, terms, tuple(notes) + ("a note",))


def test_the_renderers_show_the_curve_and_forecast() -> None:
    from perfkit.analysis.renderers import scaling_console, scaling_html, scaling_json

    s = _study()
    out = io.StringIO()
    scaling_console.render(s, out)
    text = out.getvalue()
    for r in s.points.itertuples():
        assert f"{r.speedup:.2f}x" in text
    assert "predicted" in text and "note: a note" in text
    assert "16 workers not supported, no interval: beyond 2x the largest count run (4)" in " ".join(text.split())
    doc = json.loads(io.StringIO(json.dumps(scaling_json.document(s))).getvalue())
    assert set(doc) == set(scaling_json.KEYS)
    assert [p["workers"] for p in doc["points"]] == [1, 2, 4] and doc["forecast"][-1]["workers"] == 16
    assert doc["forecast"][-1]["epoch_lo_s"] is None and doc["forecast"][-1]["supported"] is False
    page = scaling_html.page(s)
    assert page.count("class=\"plotly-graph-div\"") == 5 and "ideal (speedup = N)" in page
    assert "Outside what the measured points support" in page and "forecast beyond what the points support" in page


@pytest.mark.parametrize("name", ["strong-0.125-1-2-4-8", "strong-0.25-1-2-4-8"])
def test_recorded_sweeps_held_out_count_falls_in_its_interval(name: str) -> None:
    """Two sweeps recorded on this project's 2-core machine (tests/data/sweeps: the run table as ``perfkit
    sweep`` analysed it; the 0.25-core one met another sweep starting beside its second one-worker run).
    Fitted on 1, 2 and 4 workers only, the forecast's 90% interval at 8 holds the 8-worker runs' epoch."""
    from pathlib import Path

    from perfkit.analysis.scaling.forecast import fit_points, workers_way

    where = Path(__file__).parents[1] / "data" / "sweeps" / name
    record = SweepRecord.from_dict(json.loads((where / "sweep.json").read_text()))
    runs = pd.read_csv(where / "runs.csv")
    fc, terms, _ = forecast(runs[runs["workers"] < 8], record, [8])
    row = fc.iloc[0]
    measured = fit_points(workers_way(runs)).query("workers == 8")["clean_epoch_s"].mean()
    assert row["supported"] and measured == measured
    assert row["epoch_lo_s"] <= measured <= row["epoch_hi_s"], (row["epoch_lo_s"], measured, row["epoch_hi_s"])
    assert (terms["formula"] == "loo").sum() == 3  # 1, 2 and 4 each left out once


def test_unequal_hosts_compute_on_the_slowest_exchange_at_the_rings_pace() -> None:
    """Worker i on A_i cores: the step's compute is the slowest worker's, the all-reduce's hops each run on
    the worker they pass through (mean 1 / A_i), and only workers as slow as the slowest are waited for."""
    equal = TRUE.terms(4)
    assert TRUE.terms(4, MACHINE.placement(4)) == equal and TRUE.epoch(4, 60, (0.25,) * 4) == TRUE.epoch(4, 60)
    fast, slow = 0.4, 0.25
    t = TRUE.terms(4, (fast, fast, fast, slow))
    assert t["compute_s"] == pytest.approx(equal["compute_s"])  # the slowest's cores: as on four slow hosts
    ring = (3 / fast + 1 / slow) / 4
    assert t["transfer_s"] == pytest.approx(TRUE.lam * 2 * ring) and t["transfer_s"] < equal["transfer_s"]
    assert t["wait_s"] == 0 and equal["wait_s"] > 0  # one slowest worker: nobody else is waited for
    two = TRUE.terms(4, (fast, fast, slow, slow * 1.05))  # two within 10% of the slowest: they race
    assert two["wait_s"] == pytest.approx(TRUE.omega * math.sqrt(2 * math.log(2)) / slow)
    assert TRUE.val(4, (fast, fast, fast, slow)) < TRUE.val(4)  # validation's collectives at the ring's pace


def test_a_cluster_file_is_forecast_on_its_own_hosts_and_says_what_was_not_tested() -> None:
    """The README's cluster (16 + 4 cores, 3 + 1 workers) on the fitted runs' 2-core machine: 1.6 cores shared
    by three workers and 0.4 for the fourth, as ``perfkit run --cluster`` emulates it."""
    from perfkit.analysis.renderers import scaling_console
    from perfkit.analysis.scaling.forecast import EQUAL, worker_cores
    from perfkit.cluster import ClusterSpec, HostSpec

    hosts = ClusterSpec((HostSpec("tensor101", "127.0.0.1", 16, 3, 20000),
                         HostSpec("tensor102", "127.0.0.2", 4, 1, 20100)), "blog-cluster.toml")
    runs = _runs(TRUE, (1, 2, 4))
    fc, _, _ = forecast(runs, _record(), [4], hosts)
    equal, cluster = fc[fc["hosts"] == EQUAL].iloc[0], fc[fc["hosts"] != EQUAL].iloc[0]
    assert cluster["workers"] == 4 and "tensor101 16 cores x 3" in cluster["hosts"] and not cluster["measured"]
    machine = Machine(MACHINE.cores_per_worker, MACHINE.machine_cores, MACHINE.other_cores)
    cores = (1.6 / 3,) * 3 + (0.4,)
    demand = (2.0 + machine.other_cores) / 2.0  # the budgets take the whole machine; the rest asks for more
    assert worker_cores(TRUE, hosts) == pytest.approx(tuple(c / demand for c in cores))
    assert cluster["steady_epoch_s"] == pytest.approx(TRUE.epoch(4, equal["steps"], worker_cores(TRUE, hosts)))
    # no count of the sweep ran unequal hosts: not supported, no interval, and it says why
    assert not cluster["supported"] and math.isnan(cluster["epoch_lo_s"]) and math.isnan(cluster["epoch_hi_s"])
    assert "no count of the sweep had unequal ones" in cluster["support_note"]
    s = ScalingStudy(_record(), runs, point_table(runs, _record()), fc, pd.DataFrame(columns=["term", "formula",
                                                                                               "value", "unit"]))
    out = io.StringIO()
    scaling_console.render(s, out, width=400)
    assert "4 (blog-cluster.toml: tensor101 16 cores x 3, tensor102 4 cores x 1)" in out.getvalue()
