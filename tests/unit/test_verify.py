"""The configuration that realises the equal-workers what-if, as a cluster file."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.analysis.verify import equal_cluster_toml
from perfkit.cluster import load_cluster
from perfkit.errors import UsageError
from tests.unit._analysis_runs import typed

META = typed({"cluster": {"hosts": [
    {"name": "fast", "address": "10.213.0.2", "cores": 1.5, "workers": 1, "base_port": 20000},
    {"name": "slow", "address": "10.213.0.3", "cores": 0.5, "workers": 1, "base_port": 20000,
     "link": {"bandwidth_mbit": 100, "latency_ms": None, "loss_pct": None}}],
    "declared": {"hosts": [
        {"name": "fast", "address": "127.0.0.1", "cores": 3, "workers": 1, "base_port": 20000},
        {"name": "slow", "address": "127.0.0.2", "cores": 1, "workers": 1, "base_port": 20000,
         "link": {"bandwidth_mbit": 100, "latency_ms": None, "loss_pct": None}}]}}})


def test_the_equal_cluster_keeps_the_declared_hosts_and_links_at_the_new_budgets(tmp_path: Path) -> None:
    path = tmp_path / "verify.toml"
    path.write_text(equal_cluster_toml(META, {"fast": 0.69, "slow": 0.69}, available=2.0))
    spec = load_cluster(path)
    assert [(h.name, h.address, h.cores) for h in spec.hosts] == [("fast", "127.0.0.1", 0.69),
                                                                 ("slow", "127.0.0.2", 0.69)]
    assert spec.cpu_budgets(2) == {"fast": 0.69, "slow": 0.69}, "budgets that fit are not scaled again"
    assert spec.hosts[1].link is not None and spec.hosts[1].link.bandwidth_mbit == 100


def test_a_configuration_larger_than_this_machine_is_refused_saying_so() -> None:
    with pytest.raises(UsageError, match=r"needs 3.00 cores \(fast 1.50, slow 1.50\), more than this machine's 2: "
                                         r"it cannot be realised here"):
        equal_cluster_toml(META, {"fast": 1.5, "slow": 1.5}, available=2.0)


def test_the_placement_cluster_moves_workers_at_the_budgets_the_run_had(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from perfkit.analysis.verify import placement_cluster_toml, proposed_workers

    row = SimpleNamespace(placement_hosts="fast:slow", placement_proposed="2:0")
    assert proposed_workers(row) == {"fast": 2, "slow": 0}
    path = tmp_path / "placement.toml"
    path.write_text(placement_cluster_toml(META, {"fast": 1.5, "slow": 0.5}, proposed_workers(row), available=2.0))
    spec = load_cluster(path)
    assert [(h.name, h.cores, h.workers) for h in spec.hosts] == [("fast", 1.5, 2)], "a host given none is left out"
    assert [w.port for w in spec.workers] == [20000, 20001]


def test_a_verification_traces_the_end_of_its_first_epoch_which_steady_figures_leave_out() -> None:
    import pandas as pd

    from perfkit.analysis.verify import verification_window

    def steps(per_epoch: dict[int, int]) -> pd.DataFrame:
        return pd.DataFrame([{"worker": w, "epoch": e, "step": s} for w, n in per_epoch.items()
                             for e in (0, 1) for s in range(n)])

    assert verification_window(steps({0: 58, 1: 58})) == "48-57"
    assert verification_window(steps({0: 8, 1: 8})) == "2-7", "never the first step, which runs cold"
    assert verification_window(steps({0: 2, 1: 2})) == "off", "too short an epoch for a window before its end"
    assert verification_window(steps({})) == "off"


def test_bench_whatif_judges_each_cluster_on_the_median_of_its_repeats() -> None:
    from benchmarks.whatif import summarise

    def row(pred: float, meas: float | None, what: str = "equal workers") -> dict:
        r = {"cluster": "2w", "what": what, "prediction": {"predicted_epoch_s": pred}}
        return r | ({"measured_epoch_s": meas, "error_ratio": (pred - meas) / meas} if meas else {"error": "boom"})

    [eq, pl] = summarise([row(10, 9), row(11, 10), row(12, 12), row(9, None), row(10, 8, "placement")])
    assert (eq["what"], eq["repeats"], eq["measured_n"]) == ("equal workers", 4, 3)
    assert eq["predicted_epoch_s"] == 11 and eq["measured_epoch_s"] == 10, "medians of the measured repeats"
    assert eq["error_ratio"] == pytest.approx(0.1) and eq["measured_spread"] == pytest.approx(12 / 9 - 1)
    assert eq["per_run_errors"] == pytest.approx([1 / 9, 0.1, 0.0])
    assert pl["error_ratio"] == pytest.approx(0.25) and pl["measured_spread"] is None
