"""Cluster descriptions: hosts, their CPU budgets and tasks, from a TOML file or a local worker count.

A cluster file lists hosts in order; workers are numbered host by host, as in the article's
``["tensor101:20000", "tensor101:20001", "tensor101:20002", "tensor102:20000"]``. Under
ParameterServerStrategy a host may also run parameter servers (``ps = K``) and one host the chief
(``chief = true``). Every process is a *task* with one index: the workers first (so worker i is task i,
as under MultiWorkerMirroredStrategy), then the parameter servers, then the chief. On a host, its
workers, parameter servers and chief take consecutive ports from ``base_port`` in that order.
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

_HOST_KEYS = {"name", "address", "cores", "workers", "base_port", "link", "ps", "chief", "ssh"}
ROLES = ("worker", "ps", "chief")
_LINK_KEYS = {"bandwidth_mbit": (0.0, None), "latency_ms": (0.0, 60_000.0), "loss_pct": (0.0, 100.0)}
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
# user@host or an alias: never an option to ssh (no leading '-'), no spaces or shell characters.
SSH_TARGET = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.@:%+-]{0,254}$")
UNKNOWN_CORES = 0.0  # a host reached over SSH whose file gives no cores: read there (trainer/remote/hosts.py)


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
    ps: int = 0  # parameter servers on this host (ParameterServerStrategy)
    chief: bool = False  # this host runs the chief (the coordinator of ParameterServerStrategy)
    ssh: str | None = None  # the SSH target perfkit launch starts this host's workers through (docs/cluster.md)

    @property
    def processes(self) -> int:
        return self.workers + self.ps + int(self.chief)

    def count(self, role: str) -> int:
        return {"worker": self.workers, "ps": self.ps, "chief": int(self.chief)}[role]

    @property
    def ports(self) -> tuple[int, ...]:
        return self.picked_ports or tuple(range(self.base_port, self.base_port + self.processes))


@dataclass(frozen=True)
class WorkerSpec:
    index: int
    host: str
    address: str
    port: int
    role: str = "worker"  # worker | ps | chief
    task: int = -1  # index among the tasks of its role (TF_CONFIG's task index); -1: same as ``index``

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def task_index(self) -> int:
        return self.index if self.task < 0 else self.task

    @property
    def name(self) -> str:
        """How messages name it: ``worker 1``, ``ps 0``, ``chief``."""
        return "chief" if self.role == "chief" else f"{self.role} {self.task_index}"


@dataclass(frozen=True)
class ClusterSpec:
    hosts: tuple[HostSpec, ...]
    source: str | None = None

    @property
    def tasks(self) -> tuple[WorkerSpec, ...]:
        """Every process of the cluster: workers (host by host), then parameter servers, then the chief."""
        out: list[WorkerSpec] = []
        for role in ROLES:
            n = 0
            for host in self.hosts:
                first = sum(host.count(r) for r in ROLES[:ROLES.index(role)])
                for k in range(host.count(role)):
                    out.append(WorkerSpec(len(out), host.name, host.address, host.ports[first + k], role, n))
                    n += 1
        return tuple(out)

    @property
    def workers(self) -> tuple[WorkerSpec, ...]:
        return tuple(t for t in self.tasks if t.role == "worker")

    @property
    def num_workers(self) -> int:
        return sum(h.workers for h in self.hosts)

    @property
    def num_ps(self) -> int:
        return sum(h.ps for h in self.hosts)

    @property
    def is_ps(self) -> bool:
        """A ParameterServerStrategy cluster (it has parameter servers or a chief)."""
        return self.num_ps > 0 or any(h.chief for h in self.hosts)

    @property
    def chief(self) -> WorkerSpec | None:
        return next((t for t in self.tasks if t.role == "chief"), None)

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
        """TF_CONFIG of task ``index``: the whole cluster by role, and which task this is."""
        tasks = self.tasks
        jobs = {role: [t.endpoint for t in tasks if t.role == role] for role in ROLES}
        me = tasks[index]
        return {"cluster": {role: eps for role, eps in jobs.items() if eps},
                "task": {"type": me.role, "index": me.task_index}}

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
        ports = iter(free_ports(sum(h.processes for h in self.hosts)))
        hosts = tuple(replace(h, picked_ports=tuple(next(ports) for _ in range(h.processes))) for h in self.hosts)
        return ClusterSpec(hosts, self.source)

    def workers_only(self) -> ClusterSpec:
        """The same hosts running only their workers (the synchronous run of a ps cluster file)."""
        hosts = tuple(replace(h, ps=0, chief=False, picked_ports=h.picked_ports[:h.workers])
                      for h in self.hosts if h.workers)
        return ClusterSpec(hosts, self.source)

    def with_addresses(self, addresses: dict[str, str]) -> ClusterSpec:
        """The same hosts at the addresses of their emulated network (each host its own namespace)."""
        return ClusterSpec(tuple(replace(h, address=addresses.get(h.name, h.address)) for h in self.hosts),
                           self.source)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source,
                "hosts": [{"name": h.name, "address": h.address, "cores": h.cores, "workers": h.workers,
                           "base_port": h.base_port, "picked_ports": list(h.picked_ports),
                           "link": h.link.to_dict() if h.link else None, "ps": h.ps, "chief": h.chief,
                           **({"ssh": h.ssh} if h.ssh else {})}
                          for h in self.hosts],
                "workers": [{"index": w.index, "host": w.host, "endpoint": w.endpoint} for w in self.workers],
                "tasks": [{"index": t.index, "host": t.host, "endpoint": t.endpoint, "role": t.role,
                           "task": t.task_index} for t in self.tasks]}


def cluster_from_dict(d: dict[str, Any]) -> ClusterSpec:
    """Inverse of ``ClusterSpec.to_dict``."""
    hosts = tuple(HostSpec(h["name"], h["address"], float(h["cores"]), int(h["workers"]), int(h["base_port"]),
                           tuple(h.get("picked_ports", ())), Link(**h["link"]) if h.get("link") else None,
                           int(h.get("ps", 0)), bool(h.get("chief", False)), h.get("ssh"))
                  for h in d["hosts"])
    return ClusterSpec(hosts, source=d.get("source"))


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def local_cluster(num_workers: int, cores: float, host: str = "localhost", ps: int = 0) -> ClusterSpec:
    """``num_workers`` workers on 127.0.0.1 with free ports picked by the OS; with ``ps`` parameter
    servers, also those and the chief (ParameterServerStrategy)."""
    if num_workers < 1:
        raise UsageError("--workers: must be at least 1")
    if ps < 0:
        raise UsageError("--ps: must be at least 1")
    ports = tuple(free_ports(num_workers + ps + int(ps > 0)))
    return ClusterSpec((HostSpec(host, "127.0.0.1", cores, num_workers, ports[0], ports, ps=ps, chief=ps > 0),),
                       source=None)


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
                raise UsageError(f"port {w.endpoint} for {w.name} ({w.host}) is not free: "
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
    check_consistent(path, spec)
    return spec


def _host(path: Path, i: int, h: Any) -> HostSpec:
    where = f"{path}: hosts[{i}]"
    if not isinstance(h, dict):
        raise UsageError(f"{where}: must be a table")
    # A host reached over SSH says its own cores (read when perfkit launch starts it).
    optional = {"base_port", "link", "ps", "chief", "ssh"} | ({"cores"} if "ssh" in h else set())
    unknown, missing = set(h) - _HOST_KEYS, _HOST_KEYS - set(h) - optional
    if unknown or missing:
        what = f"unknown key(s) {', '.join(sorted(unknown))}" if unknown else f"missing {', '.join(sorted(missing))}"
        raise UsageError(f"{where}: {what}; keys are {', '.join(sorted(_HOST_KEYS))}")
    name, address = h["name"], h["address"]
    if not isinstance(name, str) or sanitize_id(name, f"{where}.name") != name:
        raise UsageError(f"{where}.name: {name!r} must use only letters, digits, '.', '_', '-'")
    if not isinstance(address, str) or not (_is_ip(address) or _HOSTNAME.match(address)):
        raise UsageError(f"{where}.address: {address!r} is not an IP address or host name")
    cores, workers, port = h.get("cores", UNKNOWN_CORES), h["workers"], h.get("base_port", 20000)
    ps, chief, ssh = h.get("ps", 0), h.get("chief", False), h.get("ssh")
    if ssh is not None and not (isinstance(ssh, str) and SSH_TARGET.match(ssh)):
        raise UsageError(f"{where}.ssh: {ssh!r} is not an SSH target (host, user@host or a ~/.ssh/config alias)")
    if "cores" in h and (isinstance(cores, bool) or not isinstance(cores, (int, float)) or not cores > 0):
        raise UsageError(f"{where}.cores: {cores!r} must be a positive number")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise UsageError(f"{where}.workers: {workers!r} must be an integer >= 0")
    if isinstance(ps, bool) or not isinstance(ps, int) or ps < 0:
        raise UsageError(f"{where}.ps: {ps!r} must be an integer >= 0 (parameter servers on this host)")
    if not isinstance(chief, bool):
        raise UsageError(f"{where}.chief: {chief!r} must be true or false")
    count = workers + ps + int(chief)
    if count < 1:
        raise UsageError(f"{where}.workers: {workers!r} must be an integer >= 1 (or the host runs ps or the chief)")
    if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535 - count:
        raise UsageError(f"{where}.base_port: {port!r} must be an integer in 1024..{65535 - count}")
    return HostSpec(name, address, float(cores), workers, port, link=_link(where, h.get("link")), ps=ps, chief=chief,
                    ssh=ssh)


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


def check_consistent(path: Path, spec: ClusterSpec) -> None:
    names = [h.name for h in spec.hosts]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise UsageError(f"{path}: host name {dup!r} appears more than once")
    seen: dict[str, str] = {}
    for t in spec.tasks:
        if t.endpoint in seen:
            raise UsageError(f"{path}: {t.endpoint} is used by {seen[t.endpoint]} and {t.name}")
        seen[t.endpoint] = t.name
    chiefs = [h.name for h in spec.hosts if h.chief]
    if len(chiefs) > 1:
        raise UsageError(f"{path}: chief = true on hosts {', '.join(chiefs)}; a cluster has one chief")
    if spec.num_workers < 1:
        raise UsageError(f"{path}: no host runs a worker; give one host workers >= 1")


def check_mode(spec: ClusterSpec, mode: str, min_share: float = 0.1, cores: float | None = None) -> None:
    """The cluster fits the strategy: parameter servers and a chief for ``ps``, neither for ``multi``; an
    emulated host's budget (on ``cores`` of this machine) gives each of its processes ``min_share`` core."""
    where = spec.source or "--workers"
    if mode == "ps":
        scheduled = spec.source == "TF_CONFIG"  # a scheduler's cluster: its own task list, not a file's keys
        if spec.num_ps < 1:
            raise UsageError(f"{where}: --mode ps needs at least one parameter server: " + (
                "add a ps task to the cluster" if scheduled else "add ps = 1 to a [[hosts]] table (or --ps P with "
                                                                 "--workers)"))
        if spec.chief is None:
            raise UsageError(f"{where}: --mode ps needs the chief: add a chief task to the cluster" if scheduled else
                             f"{where}: --mode ps needs the chief's host: add chief = true to one [[hosts]] table")
    elif spec.is_ps:
        raise UsageError(f"{where}: ps and chief are for --mode ps; --mode {mode} runs workers only")
    if cores is None:
        return
    for host, budget in spec.cpu_budgets(cores).items():
        h = spec.host(host)
        if budget / h.processes < min_share:
            raise UsageError(f"{where}: host {host} has {h.processes} processes ({h.workers} workers, {h.ps} ps"
                             f"{', the chief' if h.chief else ''}) for {budget:.2g} of this machine's {cores:g} cores: "
                             f"fewer than {min_share:g} core each; give it fewer parameter servers or workers")
