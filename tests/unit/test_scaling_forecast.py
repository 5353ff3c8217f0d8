"""The scaling analysis on hand-made runs with known answers: points, the forecast's fit, the renderers."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest

from perfkit.analysis.scaling import BASELINE, POINT, RUN_COLUMNS, ScalingStudy, SweepRecord, point_table
from perfkit.analysis.scaling_forecast import StepModel, fit, forecast, lstsq

TRUE = StepModel(c0=0.004, c1=0.16, beta=0.01, lam=0.003, omega=0.006, v0=0.2, v1=0.8, grad_mb=1.8, strong=True)
BATCH, SAMPLES = 1024, 60 * 1024


def _runs(model: StepModel, counts: tuple[int, ...], rounds: int = 2, noise: float = 0.0) -> pd.DataFrame:
    """RUN_COLUMNS rows as the model says each count runs (``noise``: a relative wobble per round)."""
    rows = []
    for r in range(1, rounds + 1):
        wobble = 1 + noise * (1 if r % 2 else -1)
        for n in counts:
            steps = SAMPLES // BATCH
            t = {k: v * wobble for k, v in model.terms(n).items()}
            val = (model.v0 + model.v1 * model.x(n)) * wobble
            epoch = steps * sum(t.values()) + val
            rows.append({"run_id": f"r{r}n{n}", "round": r, "role": POINT, "workers": n, "global_batch": BATCH,
                         "per_worker_batch": BATCH / n, "steps": steps, "steady_epoch_s": epoch,
                         "train_s": epoch - val, "val_s": val, "epoch_samples": steps * BATCH,
                         "step_s": sum(t.values()), **t, "input_s": math.nan, "split_source": "trace",
                         "cpu_s_per_1k_samples": 1.0 + n, "rss_peak_max_bytes": 1e8, "rate": steps * BATCH / epoch,
                         "speedup": math.nan})
    runs = pd.DataFrame(rows, columns=RUN_COLUMNS)
    ref = runs.loc[runs["workers"] == 1, "rate"].mean()
    runs["speedup"] = runs["rate"] / ref
    return runs


def _record(counts: tuple[int, ...] = (1, 2, 4), status: str = "complete") -> SweepRecord:
    return SweepRecord("sweep-test", counts, 2, "strong", 0.5, "quick", BATCH, POINT, "2026-01-01T00:00:00Z",
                       status=status, gradient_bytes=TRUE.grad_mb * 1e6)


def test_nonnegative_least_squares_drops_a_negative_column() -> None:
    a = np.column_stack([np.ones(4), np.arange(4.0)])
    y = 5 - 1.0 * np.arange(4.0)  # a falling line: a negative slope is refused, the mean is the best fit left
    coef = lstsq(a, y, nonneg=(1,))
    assert coef[1] == 0 and coef[0] == pytest.approx(y.mean())
    assert lstsq(a, y) == pytest.approx([5, -1])


def test_the_fit_recovers_a_model_and_predicts_beyond() -> None:
    runs = _runs(TRUE, (1, 2, 4, 8))
    m = fit(runs, TRUE.grad_mb, strong=True)
    assert m is not None
    for name in ("c0", "c1", "omega", "v0", "v1"):
        assert getattr(m, name) == pytest.approx(getattr(TRUE, name), rel=1e-6)
    fc, terms, _ = forecast(runs[runs["workers"] < 8], _record(), [8, 16])
    want = TRUE.epoch(16, SAMPLES // BATCH)
    row16 = fc.set_index("workers").loc[16]
    assert row16["steady_epoch_s"] == pytest.approx(want, rel=1e-6) and not row16["measured"]
    assert set(terms["formula"]) >= {"c0", "c1 * x", "lam * (N-1)", "omega * sqrt(2 ln N)"}


def test_the_interval_holds_the_repeats_spread() -> None:
    runs = _runs(TRUE, (1, 2, 4), noise=0.05)
    fc, _, _ = forecast(runs, _record(), [1, 2, 4, 8])
    for r in fc.itertuples():
        assert r.epoch_lo_s < r.steady_epoch_s < r.epoch_hi_s
        assert r.speedup_lo < r.speedup < r.speedup_hi
    measured = fc[fc["measured"]]
    assert (measured["error"].abs() < 0.06).all()  # the wobble is +-5% around the model


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
    fc, terms, notes = forecast(runs, _record(), [1, 2, 4, 8])
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
    doc = json.loads(io.StringIO(json.dumps(scaling_json.document(s))).getvalue())
    assert set(doc) == set(scaling_json.KEYS)
    assert [p["workers"] for p in doc["points"]] == [1, 2, 4] and doc["forecast"][-1]["workers"] == 8
    page = scaling_html.page(s)
    assert page.count("class=\"plotly-graph-div\"") == 5 and "ideal (speedup = N)" in page
