"""Cluster descriptions: hosts, their CPU budgets and workers, from a TOML file or a local worker count.

A cluster file lists hosts in order; workers are numbered host by host, as in the article's
``["tensor101:20000", "tensor101:20001", "tensor101:20002", "tensor102:20000"]``.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfkit.config import sanitize_id
from perfkit.errors import UsageError

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

_HOST_KEYS = {"name", "address", "cores", "workers", "base_port", "link"}
_LINK_KEYS = {"bandwidth_mbit": (0.0, None), "latency_ms": (0.0, 60_000.0), "loss_pct": (0.0, 100.0)}
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Link:
    """An emulated host's link to the others (both directions); None fields are not shaped."""

    bandwidth_mbit: float | None = None
    latency_ms: float | None = None
    loss_pct: float | None = None

    @property
    def needs_netem(self) -> bool:
        return bool(self.latency_ms) or bool(self.loss_pct)

    def to_dict(self) -> dict[str, float | None]:
        return {"bandwidth_mbit": self.bandwidth_mbit, "latency_ms": self.latency_ms, "loss_pct": self.loss_pct}


@dataclass(frozen=True)
class HostSpec:
    name: str
    address: str
    cores: float  # the host's CPU budget in cores
    workers: int
    base_port: int
    picked_ports: tuple[int, ...] = ()  # a local cluster's OS-picked free ports, not contiguous
    link: Link | None = None  # emulated runs only: the shaping of this host's link

    @property
    def ports(self) -> tuple[int, ...]:
        return self.picked_ports or tuple(range(self.base_port, self.base_port + self.workers))


@dataclass(frozen=True)
class WorkerSpec:
    index: int
    host: str
    address: str
    port: int

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass(frozen=True)
class ClusterSpec:
    hosts: tuple[HostSpec, ...]
    source: str | None = None

    @property
    def workers(self) -> tuple[WorkerSpec, ...]:
        out: list[WorkerSpec] = []
        for host in self.hosts:
            for port in host.ports:
                out.append(WorkerSpec(len(out), host.name, host.address, port))
        return tuple(out)

    @property
    def num_workers(self) -> int:
        return sum(h.workers for h in self.hosts)

    def host(self, name: str) -> HostSpec:
        for host in self.hosts:
            if host.name == name:
                return host
        raise UsageError(f"--host: {name!r} is not in {self.source or 'the cluster'}; "
                         f"hosts: {', '.join(h.name for h in self.hosts)}")

    def is_local(self) -> bool:
        """Every address is on this machine (loopback), so the whole cluster can run here."""
        return all(is_loopback(h.address) for h in self.hosts)

    def tf_config(self, index: int) -> dict[str, Any]:
        return {"cluster": {"worker": [w.endpoint for w in self.workers]},
                "task": {"type": "worker", "index": index}}

    def cpu_budgets(self, available_cores: float) -> dict[str, float]:
        """Each host's budget, scaled down together when they add up to more than this machine has
        (16 + 4 cores emulated on 2 -> 1.6 and 0.4): the ratio between hosts is what is emulated."""
        total = sum(h.cores for h in self.hosts)
        scale = min(1.0, available_cores / total)
        return {h.name: h.cores * scale for h in self.hosts}

    def with_free_ports(self) -> ClusterSpec:
        """The same hosts on free ports of this machine. TensorFlow's gRPC server binds the wildcard
        address (0.0.0.0:port) whatever address a worker is given, so two emulated hosts cannot both use
        port 20000 here as two real hosts can; the declared ports stay in the file and in run.json."""
        ports = iter(free_ports(self.num_workers))
        hosts = tuple(replace(h, picked_ports=tuple(next(ports) for _ in range(h.workers))) for h in self.hosts)
        return ClusterSpec(hosts, self.source)

    def with_addresses(self, addresses: dict[str, str]) -> ClusterSpec:
        """The same hosts at the addresses of their emulated network (each host its own namespace)."""
        return ClusterSpec(tuple(replace(h, address=addresses.get(h.name, h.address)) for h in self.hosts),
                           self.source)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source,
                "hosts": [{"name": h.name, "address": h.address, "cores": h.cores, "workers": h.workers,
                           "base_port": h.base_port, "picked_ports": list(h.picked_ports),
                           "link": h.link.to_dict() if h.link else None} for h in self.hosts],
                "workers": [{"index": w.index, "host": w.host, "endpoint": w.endpoint} for w in self.workers]}


def cluster_from_dict(d: dict[str, Any]) -> ClusterSpec:
    """Inverse of ``ClusterSpec.to_dict``."""
    hosts = tuple(HostSpec(h["name"], h["address"], float(h["cores"]), int(h["workers"]), int(h["base_port"]),
                           tuple(h.get("picked_ports", ())), Link(**h["link"]) if h.get("link") else None)
                  for h in d["hosts"])
    return ClusterSpec(hosts, source=d.get("source"))


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def local_cluster(num_workers: int, cores: float, host: str = "localhost") -> ClusterSpec:
    """``num_workers`` workers on 127.0.0.1 with free ports picked by the OS."""
    if num_workers < 1:
        raise UsageError("--workers: must be at least 1")
    ports = tuple(free_ports(num_workers))
    return ClusterSpec((HostSpec(host, "127.0.0.1", cores, num_workers, ports[0], ports),), source=None)


def free_ports(count: int, address: str = "127.0.0.1") -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((address, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def check_ports_free(workers: tuple[WorkerSpec, ...]) -> None:
    """Fail before anything starts if a worker's port is taken on this machine."""
    for w in workers:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # As gRPC binds: connections of an earlier run still in TIME_WAIT do not make a port taken
            # (two Slurm job steps in a row reuse the same ports); a listener still does.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((w.address if is_loopback(w.address) else "0.0.0.0", w.port))
            except OSError as exc:
                raise UsageError(f"port {w.endpoint} for worker {w.index} ({w.host}) is not free: "
                                 f"{exc.strerror or exc}") from None


def load_cluster(path: str | Path) -> ClusterSpec:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read cluster file ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML ({str(exc).splitlines()[0]})") from None
    hosts = raw.get("hosts")
    if not isinstance(hosts, list) or not hosts:
        raise UsageError(f"{path}: needs at least one [[hosts]] table with name, address, cores, workers, base_port")
    spec = ClusterSpec(tuple(_host(path, i, h) for i, h in enumerate(hosts)), source=str(path))
    _check_consistent(path, spec)
    return spec


def _host(path: Path, i: int, h: Any) -> HostSpec:
    where = f"{path}: hosts[{i}]"
    if not isinstance(h, dict):
        raise UsageError(f"{where}: must be a table")
    unknown, missing = set(h) - _HOST_KEYS, _HOST_KEYS - set(h) - {"base_port", "link"}
    if unknown or missing:
        what = f"unknown key(s) {', '.join(sorted(unknown))}" if unknown else f"missing {', '.join(sorted(missing))}"
        raise UsageError(f"{where}: {what}; keys are {', '.join(sorted(_HOST_KEYS))}")
    name, address = h["name"], h["address"]
    if not isinstance(name, str) or sanitize_id(name, f"{where}.name") != name:
        raise UsageError(f"{where}.name: {name!r} must use only letters, digits, '.', '_', '-'")
    if not isinstance(address, str) or not (_is_ip(address) or _HOSTNAME.match(address)):
        raise UsageError(f"{where}.address: {address!r} is not an IP address or host name")
    cores, workers, port = h["cores"], h["workers"], h.get("base_port", 20000)
    if isinstance(cores, bool) or not isinstance(cores, (int, float)) or not cores > 0:
        raise UsageError(f"{where}.cores: {cores!r} must be a positive number")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"{where}.workers: {workers!r} must be an integer >= 1")
    if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535 - workers:
        raise UsageError(f"{where}.base_port: {port!r} must be an integer in 1024..{65535 - workers}")
    return HostSpec(name, address, float(cores), workers, port, link=_link(where, h.get("link")))


def _link(where: str, raw: Any) -> Link | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise UsageError(f"{where}.link: must be a table such as {{ bandwidth_mbit = 1000 }}")
    unknown = set(raw) - set(_LINK_KEYS)
    if unknown:
        raise UsageError(f"{where}.link: unknown key(s) {', '.join(sorted(unknown))}; keys are "
                         f"{', '.join(_LINK_KEYS)}")
    values: dict[str, float] = {}
    for key, (low, high) in _LINK_KEYS.items():
        v = raw.get(key)
        if v is None:
            continue
        bad = isinstance(v, bool) or not isinstance(v, (int, float)) or v < low or (high is not None and v > high)
        if bad or (key == "bandwidth_mbit" and v <= 0):
            limits = "> 0" if high is None else f"in {low:g}..{high:g}"
            raise UsageError(f"{where}.link.{key}: {v!r} must be a number {limits}")
        values[key] = float(v)
    return Link(**values)


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
        return True
    except ValueError:
        return False


def _check_consistent(path: Path, spec: ClusterSpec) -> None:
    names = [h.name for h in spec.hosts]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise UsageError(f"{path}: host name {dup!r} appears more than once")
    seen: dict[str, int] = {}
    for w in spec.workers:
        if w.endpoint in seen:
            raise UsageError(f"{path}: {w.endpoint} is used by workers {seen[w.endpoint]} and {w.index}")
        seen[w.endpoint] = w.index
