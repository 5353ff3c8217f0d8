"""The forecast calibration benchmark's own logic: the checked cluster is the sweep's scale model, and the
summary counts errors and intervals as the goals read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.scaling import CASES, _judged, cluster_file, summary, with_cores
from perfkit.cluster import load_cluster
from perfkit.studies.sweep import emulated_cluster


def test_the_checked_cluster_is_the_sweeps_scale_model(tmp_path: Path) -> None:
    case = CASES["strong-0.125"]
    spec = load_cluster(cluster_file(case, tmp_path / "c.toml"))
    want = emulated_cluster(case.check, case.cores)
    assert [(h.name, h.address, h.cores, h.workers) for h in spec.hosts] == \
        [(h.name, h.address, h.cores, h.workers) for h in want.hosts]


def test_an_interval_holds_or_not_and_a_forecast_without_one_counts_only_for_error() -> None:
    rows = [_judged({"predicted_s": 10.0, "lo_s": 9.0, "hi_s": 11.0, "measured_s": 10.5}),
            _judged({"predicted_s": 10.0, "lo_s": 9.0, "hi_s": 11.0, "measured_s": 12.0}),
            _judged({"predicted_s": 10.0, "lo_s": None, "hi_s": None, "measured_s": 8.0}),
            _judged({"failure": "perfkit run: exit 1"})]
    assert [r["held"] for r in rows] == [True, False, None, None]
    s = summary(rows)
    assert s["n"] == 3 and s["mean_abs_error"] == pytest.approx((0.05 + 0.2 + 0.2) / 3)
    assert s["n_intervals"] == 2 and s["coverage"] == 0.5
    assert s["meets_error"] is False and s["meets_coverage"] is False


def test_each_checked_run_is_judged_on_its_own_too() -> None:
    """The interval is one run's (its sigma holds the spread of single runs): each checked run is a case of
    its own, beside each forecast against the mean of its runs."""
    rows = [_judged({"predicted_s": 10.0, "lo_s": 9.0, "hi_s": 11.0, "measured_s": 10.0,
                     "checks": [{"measured_s": 8.5}, {"measured_s": 11.5}, {"measured_s": float("nan")}]}),
            _judged({"predicted_s": 20.0, "lo_s": None, "hi_s": None, "measured_s": 22.0,
                     "checks": [{"measured_s": 22.0}]})]
    s = summary(rows)
    assert s["coverage"] == 1.0 and s["n_intervals"] == 1, "the mean of 8.5 and 11.5 lies inside"
    assert s["n_runs"] == 3 and s["run_mean_abs_error"] == pytest.approx((0.15 + 0.15 + 0.1) / 3)
    assert s["n_run_intervals"] == 2 and s["run_coverage"] == 0.0, "neither single run lies inside"


def test_the_unequal_case_is_forecast_from_hosts_as_small_as_its_slowest_workers_share() -> None:
    case = with_cores(CASES["readme-unequal"], machine_cores=2.0)
    spec = load_cluster(Path(__file__).parents[2] / str(case.cluster))
    assert sum(h.workers for h in spec.hosts) == case.check
    assert case.cores == pytest.approx(0.4)  # 16:4 cores on 2: tensor102's one worker on 0.4, tensor101's three on 0.53
    assert all(case.batch % n == 0 for n in (*case.fit, case.check))  # strong scaling divides the batch
