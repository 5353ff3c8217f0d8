"""CPU quotas for emulated hosts: one cgroup per host, on cgroup v1 or v2, decided before any worker starts.

- v1: a group under the cpu controller's hierarchy (``cpu/perfkit/<group>``) with ``cpu.cfs_quota_us``.
- v2: a group under ``perfkit/`` with ``cpu.max``. The cpu controller must be enabled in every parent's
  ``cgroup.subtree_control`` down to the group; the kernel refuses that (EBUSY) in a non-root group that
  holds processes (the no-internal-process rule), as at the root of a container's cgroup namespace, and
  perfkit then says so instead of moving anyone's processes. Controllers it enabled stay enabled: turning
  one off could break another user of the hierarchy.

Groups are named ``<launcher pid>-<run>-<host>``; a later start removes only empty groups whose launcher
is gone, never one a live run owns. ``read_back`` reports what a process actually got: its cgroup, the
tightest quota on the way from it to the root, and its affinity mask.
"""

from __future__ import annotations

import errno
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# CFS hands a group its quota once per period. The kernel's default 100 ms lets a multi-threaded worker
# burn a 0.4-core budget in a 20 ms burst and then stand still for 80 ms: a step's time then depends on
# where it falls in the period, and the synchronous step waits for whichever worker was frozen. A real
# slower host is slow evenly, so the period is short; it grows only where the quota would fall under the
# kernel's 1 ms minimum (a budget under 0.1 core).
PERIOD_US = 10_000
MIN_QUOTA_US = 1_000
MAX_PERIOD_US = 1_000_000


def period_for(cores: float) -> int:
    return min(MAX_PERIOD_US, max(PERIOD_US, math.ceil(MIN_QUOTA_US / cores))) if cores > 0 else MAX_PERIOD_US
_OWNED = re.compile(r"^(\d+)-")


class CgroupFS:
    """The kernel's cgroup filesystem and /proc; tests substitute a fake that keeps the kernel's rules."""

    def __init__(self, root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc")) -> None:
        self.root, self.proc = root, proc

    def read(self, path: Path) -> str:
        try:
            return path.read_text()
        except OSError:
            return ""

    def exists(self, path: Path) -> bool:
        return path.exists()

    def write(self, path: Path, text: str) -> None:
        with open(path, "w") as f:  # one write(2): cgroupfs takes each write as one command
            f.write(text)

    def mkdir(self, path: Path) -> None:
        path.mkdir(exist_ok=True)

    def rmdir(self, path: Path) -> None:
        path.rmdir()

    def children(self, path: Path) -> list[Path]:
        try:
            return [p for p in path.iterdir() if p.is_dir()]
        except OSError:
            return []

    def proc_cgroup(self, pid: int) -> str:
        return self.read(self.proc / str(pid) / "cgroup")

    def affinity(self, pid: int) -> list[int] | None:
        try:
            return sorted(os.sched_getaffinity(pid))
        except (AttributeError, OSError):
            return None

    def alive(self, pid: int) -> bool:
        return (self.proc / str(pid)).exists()


def _why(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{name}: {exc.strerror}" if name and exc.strerror else str(exc)


@dataclass
class CpuQuota:
    """Per-host CPU quotas of one run. ``mechanism`` is cgroup-v1, cgroup-v2 or none; ``tried`` says,
    one phrase per mechanism, why it was not used."""

    run_id: str
    fs: CgroupFS = field(default_factory=CgroupFS)
    owner: int = field(default_factory=lambda: os.getpid())
    mechanism: str = "none"
    tried: list[str] = field(default_factory=list)
    groups: dict[str, Path] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)
    enabled_in: list[str] = field(default_factory=list)
    on_create: Callable[[Path], None] | None = None  # told of each group made (the run's janitor)
    # Deferred: the groups start unlimited and each host's quota is written when its first worker reports
    # training (``limit``): TensorFlow's import and server start, minutes at a 0.25-core budget on this
    # kind of machine, are not what the emulated host is there to slow down.
    deferred: bool = False
    held: set[str] = field(default_factory=set)  # hosts whose quota is not written yet
    limited_wall_ns: dict[str, int] = field(default_factory=dict)
    _settings: dict[str, tuple[int, int]] = field(default_factory=dict)  # host -> (quota, period) in us

    @classmethod
    def detect(cls, run_id: str, fs: CgroupFS | None = None,
               on_create: Callable[[Path], None] | None = None) -> CpuQuota:
        quota = cls(run_id, fs or CgroupFS(), on_create=on_create)
        root = quota.fs.root
        if quota.fs.exists(root / "cgroup.controllers"):
            quota.mechanism = "cgroup-v2"
        elif quota.fs.exists(root / "cpu" / "cpu.cfs_quota_us"):
            quota.mechanism = "cgroup-v1"
        else:
            quota.tried.append(f"cgroups: neither v2 ({root}/cgroup.controllers) nor v1's cpu controller "
                               f"({root}/cpu) is mounted")
        if quota.enabled:
            quota._remove_stale()
        return quota

    @property
    def enabled(self) -> bool:
        return self.mechanism != "none"

    @property
    def base(self) -> Path:
        return self.fs.root / ("perfkit" if self.mechanism == "cgroup-v2" else "cpu/perfkit")

    def prepare(self, budgets: dict[str, float]) -> bool:
        """Every host's group with its quota, before any worker is placed; on any failure nothing is left
        made, the mechanism becomes none and ``tried`` says why."""
        try:
            if self.mechanism == "cgroup-v2":
                self._enable_v2()
            else:
                self.fs.mkdir(self.base)
            for host, cores in budgets.items():
                self._create(host, cores)
        except (OSError, _Refused) as exc:
            what = str(exc) if isinstance(exc, _Refused) else f"{exc.filename or self.base}: {_why(exc)}"
            self.tried.append(f"{self.mechanism}: {what}")
            self.cleanup()
            self.mechanism = "none"
            return False
        return True

    def _enable_v2(self) -> None:
        root = self.fs.root
        if "cpu" not in self.fs.read(root / "cgroup.controllers").split():
            raise _Refused(f"the cpu controller is not available in {root}/cgroup.controllers")
        for parent in (root, self.base):
            if parent != root:
                self.fs.mkdir(parent)
            control = parent / "cgroup.subtree_control"
            if "cpu" in self.fs.read(control).split():
                continue
            try:
                self.fs.write(control, "+cpu")
            except OSError as exc:
                busy = (" (processes live in that group: the no-internal-process rule)" if exc.errno == errno.EBUSY
                        else "")
                raise _Refused(f"cannot enable cpu in {control}: {_why(exc)}{busy}") from None
            self.enabled_in.append(str(parent))

    def _create(self, host: str, cores: float) -> None:
        group = self.base / f"{self.owner}-{self.run_id}-{host}"
        self.fs.mkdir(group)
        self.groups[host] = group
        if self.on_create is not None:
            self.on_create(group)
        period = period_for(cores)
        quota = max(MIN_QUOTA_US, int(cores * period))
        if self.mechanism == "cgroup-v2" and not self.fs.exists(group / "cpu.max"):
            raise _Refused(f"{group} has no cpu.max although cpu is enabled above it")
        self._settings[host] = (quota, period)
        self.limits[host] = quota / period
        self._write(host, None if self.deferred else quota)
        if self.deferred:
            self.held.add(host)
        else:
            self.limited_wall_ns[host] = time.time_ns()

    def _write(self, host: str, quota: int | None) -> None:
        """Host ``host``'s quota, or none (``None``: unlimited, its period kept)."""
        group, period = self.groups[host], self._settings[host][1]
        if self.mechanism == "cgroup-v2":
            self.fs.write(group / "cpu.max", f"{'max' if quota is None else quota} {period}")
        else:
            self.fs.write(group / "cpu.cfs_period_us", str(period))
            self.fs.write(group / "cpu.cfs_quota_us", str(-1 if quota is None else quota))

    def hold(self) -> None:
        """Deferred quotas lifted again before a new attempt's workers start (a restart imports anew)."""
        if not self.deferred:
            return
        for host in self._settings:
            if host not in self.held and host in self.groups:
                self._write(host, None)
                self.held.add(host)
                self.limited_wall_ns.pop(host, None)

    def limit(self, host: str) -> bool:
        """Write host ``host``'s quota now, if it is held; True when this call wrote it."""
        if host not in self.held or host not in self.groups:
            return False
        self._write(host, self._settings[host][0])
        self.held.discard(host)
        self.limited_wall_ns[host] = time.time_ns()
        return True

    def add(self, host: str, pid: int) -> None:
        group = self.groups.get(host)
        if group is not None:
            self.fs.write(group / "cgroup.procs", str(pid))

    def cleanup(self) -> list[str]:
        """Remove this run's groups (and perfkit's base when it is left empty); the ones that could not be."""
        left, kept = [], {}
        for host, group in self.groups.items():
            try:
                self.fs.rmdir(group)
            except FileNotFoundError:
                pass
            except OSError as exc:  # still in use: kept, so that a later cleanup tries again
                left.append(f"{group}: {_why(exc)}")
                kept[host] = group
        self.groups = kept
        if self.enabled and not self.fs.children(self.base):
            try:
                self.fs.rmdir(self.base)
            except OSError:
                pass  # another run made a group in the meantime, or it is perfkit's v1 base in use
        return left

    def _remove_stale(self) -> None:
        """Empty groups of launchers that are gone; another live run's groups are never touched."""
        for group in self.fs.children(self.base):
            m = _OWNED.match(group.name)
            if m and int(m.group(1)) != self.owner and not self.fs.alive(int(m.group(1))) \
                    and not self.fs.read(group / "cgroup.procs").strip():
                try:
                    self.fs.rmdir(group)
                except OSError:
                    pass

    def to_dict(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "quota_cores": dict(self.limits), "tried": list(self.tried),
                "groups": {h: str(g) for h, g in self.groups.items()}, "cpu_enabled_in": list(self.enabled_in),
                "applies_from": "training" if self.deferred else "start",
                "limited_wall_ns": dict(self.limited_wall_ns), "never_limited": sorted(self.held)}


class _Refused(Exception):
    """A cgroup setup the kernel (or the tree) does not allow; its text names the file and the reason."""


def read_back(pid: int, fs: CgroupFS | None = None) -> dict[str, Any]:
    """What process ``pid`` actually got: its cpu cgroup, the tightest CPU quota from that group up to
    the root (None: unlimited), and its affinity mask."""
    fs = fs or CgroupFS()
    text = fs.proc_cgroup(pid)
    if not text:
        return {"pid": pid, "cgroup": None, "quota_cores": None, "affinity": fs.affinity(pid), "alive": False}
    v2 = fs.exists(fs.root / "cgroup.controllers")
    rel = _cpu_path(text, v2)
    base = fs.root if v2 else fs.root / "cpu"
    quota = _tightest(fs, base, rel, v2) if rel is not None else None
    return {"pid": pid, "cgroup": rel, "quota_cores": quota, "affinity": fs.affinity(pid), "alive": True}


def _cpu_path(text: str, v2: bool) -> str | None:
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if (v2 and parts[0] == "0" and parts[1] == "") or (not v2 and "cpu" in parts[1].split(",")):
            return parts[2]
    return None


def _tightest(fs: CgroupFS, base: Path, rel: str, v2: bool) -> float | None:
    best: float | None = None
    node = base / rel.lstrip("/")
    while True:
        quota = _quota(fs, node, v2)
        if quota is not None:
            best = quota if best is None else min(best, quota)
        if node == base or base not in node.parents:
            return best
        node = node.parent


def _quota(fs: CgroupFS, group: Path, v2: bool) -> float | None:
    try:
        if v2:
            parts = fs.read(group / "cpu.max").split()
            return None if not parts or parts[0] == "max" else int(parts[0]) / int(parts[1])
        quota = int(fs.read(group / "cpu.cfs_quota_us").strip() or -1)
        return None if quota < 0 else quota / int(fs.read(group / "cpu.cfs_period_us").strip())
    except (ValueError, IndexError, ZeroDivisionError):
        return None
