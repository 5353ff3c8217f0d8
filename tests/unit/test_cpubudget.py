from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from perfkit.cluster import load_cluster, local_cluster
from perfkit.trainer.hosts import cpubudget

EXAMPLE = Path(__file__).parents[2] / "examples" / "blog-cluster.toml"


@pytest.fixture(autouse=True)
def two_cores():
    with mock.patch.object(cpubudget, "available_cores", return_value=[0, 1]):
        yield


def test_local_workers_are_pinned_one_core_each_with_thread_caps() -> None:
    placements, budgets = cpubudget.plan(local_cluster(2, 2.0), [0, 1], pin=True, emulate=False, cgroups=False)
    assert [(p.cores, p.threads) for p in placements] == [([0], 1), ([1], 1)] and budgets == {}


def test_more_workers_than_cores_share_cores_round_robin() -> None:
    placements, _ = cpubudget.plan(local_cluster(4, 2.0), [0, 1, 2, 3], pin=True, emulate=False, cgroups=False)
    assert [p.cores for p in placements] == [[0], [1], [0], [1]] and {p.threads for p in placements} == {1}


def test_no_pin_leaves_workers_alone() -> None:
    placements, _ = cpubudget.plan(local_cluster(2, 2.0), [0, 1], pin=False, emulate=False, cgroups=False)
    assert all(p.cores is None and p.threads is None for p in placements)


def test_emulated_blog_cluster_budgets_scale_to_this_machine() -> None:
    spec = load_cluster(EXAMPLE)
    placements, budgets = cpubudget.plan(spec, [0, 1, 2, 3], pin=True, emulate=True, cgroups=True)
    assert budgets == pytest.approx({"tensor101": 1.6, "tensor102": 0.4})
    assert [p.host_budget for p in placements] == pytest.approx([1.6, 1.6, 1.6, 0.4])
    assert all(p.cores is None and p.threads == 1 for p in placements)  # the cgroup quota holds them


def test_without_cgroups_each_host_gets_whole_cores() -> None:
    spec = load_cluster(EXAMPLE)
    placements, _ = cpubudget.plan(spec, [0, 1, 2, 3], pin=True, emulate=True, cgroups=False)
    assert [p.cores for p in placements] == [[0, 1], [0, 1], [0, 1], [0]]
