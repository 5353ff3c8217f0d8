"""A cgroup filesystem in a tmp dir that keeps the kernel's rules, for CpuQuota and read_back tests.

- v2: a new group gets ``cgroup.controllers`` = its parent's ``cgroup.subtree_control``, and ``cpu.max``
  only when cpu is enabled there; ``+cpu`` in a ``subtree_control`` needs cpu in that group's controllers
  and, except at the real root, no process in the group (the no-internal-process rule: EBUSY).
- v1: the cpu hierarchy is mounted at ``cpu/``; every group has the cfs files.
- both: writing a file that does not exist is ENOENT (cgroupfs cannot create files); rmdir of a group with
  processes or child groups is EBUSY.
"""

from __future__ import annotations

import errno
from pathlib import Path

from perfkit.trainer.hosts.cgroups import CgroupFS


class FakeCgroupFS(CgroupFS):
    def __init__(self, tmp: Path, version: int, controllers: str = "cpu memory io", real_root: bool = True,
                 cores: int = 2) -> None:
        super().__init__(root=tmp, proc=tmp / "proc")
        self.version, self.real_root = version, real_root
        self.members: dict[int, Path] = {}  # pid -> group directory
        self.cpus = list(range(cores))
        self.affinities: dict[int, list[int]] = {}
        if version == 2:
            for name, text in (("cgroup.controllers", controllers), ("cgroup.subtree_control", ""),
                               ("cgroup.procs", "")):
                (tmp / name).write_text(text)
        else:
            (tmp / "cpu").mkdir()
            self._v1_files(tmp / "cpu")

    # -- processes ---------------------------------------------------------------------------------
    def spawn(self, pid: int, group: Path | None = None, affinity: list[int] | None = None) -> None:
        old = self.members.get(pid)
        self.members[pid] = group or (self.root if self.version == 2 else self.root / "cpu")
        self.affinities[pid] = affinity or self.cpus
        for g in {old, self.members[pid]} - {None}:
            self._sync(g)

    def exit(self, pid: int) -> None:
        group = self.members.pop(pid)
        self._sync(group)

    def _sync(self, group: Path) -> None:
        pids = sorted(p for p, g in self.members.items() if g == group)
        (group / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))

    def alive(self, pid: int) -> bool:
        return pid in self.members

    def affinity(self, pid: int) -> list[int] | None:
        return self.affinities.get(pid)

    def proc_cgroup(self, pid: int) -> str:
        if pid not in self.members:
            return ""
        if self.version == 2:
            return f"0::/{self.members[pid].relative_to(self.root)}\n".replace("/.\n", "/\n")
        rel = self.members[pid].relative_to(self.root / "cpu")
        return f"12:cpu,cpuacct:/{rel}\n".replace("/.\n", "/\n") + "1:name=systemd:/\n"

    # -- the filesystem ----------------------------------------------------------------------------
    def mkdir(self, path: Path) -> None:
        if path.exists():
            return
        if not path.parent.exists():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        path.mkdir()
        if self.version == 2:
            enabled = (path.parent / "cgroup.subtree_control").read_text()
            for name, text in (("cgroup.controllers", enabled), ("cgroup.subtree_control", ""), ("cgroup.procs", "")):
                (path / name).write_text(text)
            if "cpu" in enabled.split():
                (path / "cpu.max").write_text("max 100000\n")
        else:
            self._v1_files(path)

    @staticmethod
    def _v1_files(path: Path) -> None:
        for name, text in (("cpu.cfs_quota_us", "-1\n"), ("cpu.cfs_period_us", "100000\n"), ("cgroup.procs", "")):
            (path / name).write_text(text)

    def write(self, path: Path, text: str) -> None:
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        group = path.parent
        if path.name == "cgroup.subtree_control":
            self._enable(group, text)
        elif path.name == "cgroup.procs":
            if self.version == 2 and (group / "cgroup.subtree_control").read_text().split():
                raise OSError(errno.EBUSY, "Device or resource busy", str(path))
            self.spawn(int(text), group, self.affinities.get(int(text)))
        else:
            path.write_text(text + "\n")

    def _enable(self, group: Path, text: str) -> None:
        want = [t[1:] for t in text.split() if t.startswith("+")]
        have = (group / "cgroup.controllers").read_text().split()
        if any(c not in have for c in want):
            raise OSError(errno.ENOENT, "No such file or directory", str(group / "cgroup.subtree_control"))
        busy = group != self.root or not self.real_root
        if busy and any(g == group for g in self.members.values()):
            raise OSError(errno.EBUSY, "Device or resource busy", str(group / "cgroup.subtree_control"))
        now = set((group / "cgroup.subtree_control").read_text().split()) | set(want)
        (group / "cgroup.subtree_control").write_text(" ".join(sorted(now)))

    def rmdir(self, path: Path) -> None:
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        if any(g == path for g in self.members.values()) or any(p.is_dir() for p in path.iterdir()):
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        for f in path.iterdir():
            f.unlink()
        path.rmdir()
