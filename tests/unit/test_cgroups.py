"""CPU quotas on fake cgroup v1 and v2 trees that keep the kernel's rules (tests/unit/_fake_cgroupfs.py)."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from perfkit.cluster import load_cluster
from perfkit.errors import UsageError
from perfkit.trainer.hosts import cpubudget, hostenv
from perfkit.trainer.hosts.cgroups import CpuQuota, read_back
from tests import clusters
from tests.unit._fake_cgroupfs import FakeCgroupFS

EXAMPLE = Path(__file__).parents[2] / "examples" / "blog-cluster.toml"
BLOG = {"tensor101": 1.6, "tensor102": 0.4}


@pytest.fixture(autouse=True)
def two_cores():
    with mock.patch.object(cpubudget, "available_cores", return_value=[0, 1]):
        yield


def _quota(fs: FakeCgroupFS, made: list[Path] | None = None) -> CpuQuota:
    fs.spawn(100)  # the launcher itself, in the root group
    with mock.patch("os.getpid", return_value=100):
        return CpuQuota.detect("run1", fs, on_create=made.append if made is not None else None)


def test_v2_enables_cpu_down_to_perfkits_groups_and_reads_back_the_quota(tmp_path: Path) -> None:
    fs, made = FakeCgroupFS(tmp_path, 2), []
    quota = _quota(fs, made)
    assert quota.mechanism == "cgroup-v2"
    assert "cpu" not in (tmp_path / "cgroup.subtree_control").read_text(), "the bug: nothing had enabled it"
    assert quota.prepare(BLOG)
    group = tmp_path / "perfkit" / "100-run1-tensor102"
    assert (group / "cpu.max").read_text() == "4000 10000\n" and made == list(quota.groups.values())
    assert quota.to_dict()["cpu_enabled_in"] == [str(tmp_path), str(tmp_path / "perfkit")]
    fs.spawn(201, affinity=[0, 1])
    quota.add("tensor102", 201)
    got = read_back(201, fs)
    assert got == {"pid": 201, "cgroup": "/perfkit/100-run1-tensor102", "quota_cores": 0.4, "affinity": [0, 1],
                   "alive": True}
    fs.exit(201)
    assert quota.cleanup() == [] and not (tmp_path / "perfkit").exists()


@pytest.mark.parametrize("version", [2, 1])
def test_a_deferred_quota_starts_lifted_applies_at_limit_and_is_lifted_again_for_a_restart(tmp_path: Path,
                                                                                          version: int) -> None:
    fs = FakeCgroupFS(tmp_path, version)
    quota = _quota(fs)
    quota.deferred = True
    assert quota.prepare(BLOG) and quota.held == set(BLOG)
    base = tmp_path / ("perfkit" if version == 2 else "cpu/perfkit")

    def written(host: str) -> str:
        group = base / f"100-run1-{host}"
        if version == 2:
            return (group / "cpu.max").read_text().strip()
        return f"{(group / 'cpu.cfs_quota_us').read_text().strip()} {(group / 'cpu.cfs_period_us').read_text().strip()}"

    lifted = "max 10000" if version == 2 else "-1 10000"
    assert written("tensor102") == lifted and written("tensor101") == lifted
    fs.spawn(201)
    quota.add("tensor102", 201)
    assert read_back(201, fs)["quota_cores"] is None, "importing TensorFlow runs unlimited"
    assert quota.limit("tensor102") and not quota.limit("tensor102"), "written once"
    assert written("tensor102") == "4000 10000" and written("tensor101") == lifted
    assert read_back(201, fs)["quota_cores"] == 0.4
    d = quota.to_dict()
    assert d["applies_from"] == "training" and set(d["limited_wall_ns"]) == {"tensor102"}
    assert d["never_limited"] == ["tensor101"] and d["quota_cores"] == BLOG, "the budget asked is kept"
    quota.hold()
    assert written("tensor102") == lifted and quota.held == set(BLOG) and quota.to_dict()["limited_wall_ns"] == {}


def test_an_undeferred_quota_applies_from_the_start(tmp_path: Path) -> None:
    quota = _quota(FakeCgroupFS(tmp_path, 2))
    assert quota.prepare(BLOG) and not quota.held and not quota.limit("tensor101")
    quota.hold()  # nothing to lift
    assert (tmp_path / "perfkit" / "100-run1-tensor101" / "cpu.max").read_text().strip() == "16000 10000"
    assert quota.to_dict()["applies_from"] == "start" and set(quota.to_dict()["limited_wall_ns"]) == set(BLOG)


def test_v2_in_a_container_root_with_processes_falls_back_and_says_why(tmp_path: Path) -> None:
    fs = FakeCgroupFS(tmp_path, 2, real_root=False)  # a cgroup namespace's root holds our own processes
    quota = _quota(fs)
    assert not quota.prepare(BLOG)
    assert quota.mechanism == "none" and "no-internal-process rule" in quota.tried[0]
    assert not (tmp_path / "perfkit").exists(), "nothing half-made is left"
    placements, _ = cpubudget.plan(load_cluster(EXAMPLE), [0, 1, 2, 3], True, True, quota.enabled)
    assert [p.cores for p in placements] == [[0, 1], [0, 1], [0, 1], [0]], "the fallback is really applied"


def test_v2_without_the_cpu_controller(tmp_path: Path) -> None:
    quota = _quota(FakeCgroupFS(tmp_path, 2, controllers="memory io"))
    assert not quota.prepare(BLOG) and "cpu controller is not available" in quota.tried[0]


def test_v1_writes_cfs_quota_and_read_back_takes_the_tightest_ancestor(tmp_path: Path) -> None:
    fs = FakeCgroupFS(tmp_path, 1)
    quota = _quota(fs)
    assert quota.mechanism == "cgroup-v1" and quota.prepare(BLOG)
    group = tmp_path / "cpu" / "perfkit" / "100-run1-tensor101"
    assert ((group / "cpu.cfs_quota_us").read_text() == "16000\n"
            and (group / "cpu.cfs_period_us").read_text() == "10000\n")
    (tmp_path / "cpu" / "perfkit" / "cpu.cfs_quota_us").write_text("50000\n")  # someone capped perfkit's parent
    fs.spawn(300)
    quota.add("tensor101", 300)
    assert read_back(300, fs)["quota_cores"] == 0.5
    assert quota.cleanup() == [f"{group}: EBUSY: Device or resource busy"], "a group in use is reported"
    fs.exit(300)
    assert quota.cleanup() == [] and not group.exists(), "a later cleanup removes what was in use"


def test_stale_groups_of_dead_launchers_go_live_ones_stay(tmp_path: Path) -> None:
    fs = FakeCgroupFS(tmp_path, 1)
    base = tmp_path / "cpu" / "perfkit"
    fs.mkdir(base)
    for name in ("77-old-a", "88-live-a", "99-busy-a", "legacy-a"):
        fs.mkdir(base / name)
    fs.spawn(88)
    fs.spawn(555, base / "99-busy-a")
    _quota(fs)
    assert sorted(p.name for p in base.iterdir() if p.is_dir()) == ["88-live-a", "99-busy-a", "legacy-a"]


def test_applied_budget_is_the_quota_capped_by_affinity_and_differences_are_named() -> None:
    placements, budgets = cpubudget.plan(load_cluster(EXAMPLE), [0, 1, 2, 3], True, True, True)
    reads = {i: {"alive": True, "quota_cores": 1.6, "affinity": [0, 1]} for i in range(3)}
    reads[3] = {"alive": True, "quota_cores": None, "affinity": [1]}  # the quota never reached it
    got = cpubudget.applied(placements, reads, budgets)
    assert got["host_budgets_cores"] == {"tensor101": 1.6, "tensor102": 1.0}
    assert got["differs_from_request"] == ["tensor102"]


def test_whole_cores_cannot_emulate_the_blog_cluster_on_two_cores() -> None:
    spec = load_cluster(EXAMPLE)
    why = cpubudget.unenforceable(spec, spec.cpu_budgets(2))
    assert why and "tensor101 2 cores, tensor102 1 core (shared)" in why
    quota = CpuQuota("r")
    quota.tried.append("cgroup-v1: /sys/fs/cgroup/cpu/perfkit: EACCES: Permission denied")
    with pytest.raises(UsageError, match="cannot be enforced here.*EACCES.*--allow-unenforced"):
        hostenv._decide(spec, quota, spec.cpu_budgets(2), allow=False)
    assert "whole-core" in hostenv._decide(spec, quota, spec.cpu_budgets(2), allow=True)


def test_whole_core_budgets_are_enforceable_by_affinity(tmp_path: Path) -> None:
    clusters.write(tmp_path / "c.toml", clusters.pair())
    spec = load_cluster(tmp_path / "c.toml")
    assert cpubudget.unenforceable(spec, spec.cpu_budgets(2)) is None


def test_the_period_is_short_and_grows_only_to_keep_the_quota_above_the_kernels_minimum() -> None:
    from perfkit.trainer.hosts.cgroups import MIN_QUOTA_US, PERIOD_US, period_for

    assert period_for(0.4) == PERIOD_US == 10_000
    assert period_for(1.5) == PERIOD_US
    assert period_for(0.05) == 20_000 and 0.05 * period_for(0.05) >= MIN_QUOTA_US
    assert period_for(0.0001) == 1_000_000
