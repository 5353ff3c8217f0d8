"""A private network for a run's local workers: nothing they open is reachable from another machine.

TensorFlow's gRPC server binds 0.0.0.0 whatever address a worker is given, and serves any graph sent to
it. So local and emulated workers run in network namespaces made for the run:
- one host (``--workers N``): one namespace with only loopback;
- several emulated hosts: a namespace per host, each with loopback and ``eth0`` at 10.213.0.<2+i>, joined by
  veth pairs to a bridge in a hub namespace. A host's ``link`` is shaped with tc on both ends of its veth
  (so both directions): ``tbf`` for bandwidth alone, ``netem`` (with its own rate) for latency or loss.

Namespaces are named ``pk<launcher pid>x<n>-<host index|hub>``; each is registered with the run's janitor
the moment it exists, and one whose launcher is gone is removed at the next start. Workers enter their
namespace through ``nsenter --net`` (unlike ``ip netns exec`` it leaves /sys mounted as it was).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from perfkit.cluster import ClusterSpec, Link
from perfkit.errors import UsageError

SUBNET = "10.213.0"
NETNS_DIR = Path("/run/netns")
_NAME = re.compile(r"^pk(\d+)x\d+-")
_counter = itertools.count()


class _Failed(Exception):
    """A command that set up the network failed; the text is its one-line stderr."""


def _ip(*args: str, ns: str | None = None) -> str:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    return _cmd(cmd)


def _tc(ns: str, *args: str) -> str:
    return _cmd(["tc", "-n", ns, *args])


def _cmd(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise _Failed(f"`{' '.join(cmd)}`: {lines[-1] if lines else f'exit code {done.returncode}'}")
    return done.stdout


def why_unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_SYS_ADMIN)"
    missing = [tool for tool in ("ip", "tc", "nsenter") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found (Debian/Ubuntu: apt-get install iproute2 util-linux)"
    return None


@dataclass
class Sandbox:
    """The run's namespaces. ``mechanism`` is netns or none (then ``reason`` says why)."""

    mechanism: str = "none"
    reason: str | None = None
    namespaces: dict[str, str] = field(default_factory=dict)  # host -> namespace
    addresses: dict[str, str] = field(default_factory=dict)  # host -> address inside the run's network
    links: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> requested and applied shaping
    made: list[str] = field(default_factory=list)  # every namespace, hub included, in creation order

    @classmethod
    def create(cls, cluster: ClusterSpec, register: Callable[[str], None]) -> Sandbox:
        """The run's network, or a Sandbox saying why there is none. A link that cannot be shaped here
        (netem missing) is a UsageError naming the host and the qdisc, after everything made is removed."""
        reason = why_unavailable()
        if reason is not None:
            return cls._without(cluster, reason)
        remove_stale()
        box = cls(mechanism="netns")
        prefix = f"pk{os.getpid()}x{next(_counter)}"
        first = f"{prefix}-{'0' if len(cluster.hosts) == 1 else 'hub'}"
        try:  # root without CAP_SYS_ADMIN (a default container) cannot: said, like not being root
            box._namespace(first, register)
        except (_Failed, subprocess.TimeoutExpired) as exc:
            box.close()
            return cls._without(cluster, f"cannot create network namespaces here ({exc})")
        try:
            if len(cluster.hosts) == 1:
                box.namespaces[cluster.hosts[0].name] = first
            else:
                box._network(cluster, prefix, register)
        except (_Failed, subprocess.TimeoutExpired, UsageError) as exc:
            box.close()
            if isinstance(exc, UsageError):
                raise
            raise UsageError(f"could not make the run's private network: {exc}") from None
        return box

    @classmethod
    def _without(cls, cluster: ClusterSpec, reason: str) -> Sandbox:
        """No namespaces: a Sandbox saying why, or a UsageError when a link asks for shaping."""
        shaped = [i for i, h in enumerate(cluster.hosts) if h.link]
        if shaped:
            raise UsageError(f"{cluster.source or 'cluster'}: hosts[{shaped[0]}].link: emulated links need network "
                             f"namespaces, and here: {reason}")
        return cls(reason=reason)

    def _namespace(self, name: str, register: Callable[[str], None]) -> None:
        _ip("netns", "add", name)
        self.made.append(name)
        register(name)
        _ip("link", "set", "lo", "up", ns=name)

    def _network(self, cluster: ClusterSpec, prefix: str, register: Callable[[str], None]) -> None:
        hub = f"{prefix}-hub"
        _ip("link", "add", "br0", "type", "bridge", ns=hub)
        _ip("link", "set", "br0", "up", ns=hub)
        for i, host in enumerate(cluster.hosts):
            ns, address = f"{prefix}-{i}", f"{SUBNET}.{2 + i}"
            self._namespace(ns, register)
            _ip("link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns, ns=hub)
            _ip("link", "set", f"v{i}", "master", "br0", "up", ns=hub)
            _ip("addr", "add", f"{address}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
            self.namespaces[host.name], self.addresses[host.name] = ns, address
            if host.link:
                try:
                    shape(ns, "eth0", host.link)
                    shape(hub, f"v{i}", host.link)
                except _Failed as exc:
                    raise UsageError(_shape_error(cluster, i, host.link, exc)) from None
                self.links[host.name] = {"requested": host.link.to_dict(),
                                         "egress": qdisc(ns, "eth0"), "ingress": qdisc(hub, f"v{i}")}

    def wrap(self, host: str) -> list[str]:
        """The command prefix that starts a process inside ``host``'s namespace (empty without one)."""
        path = self.path(host)
        return ["nsenter", f"--net={path}", "--"] if path else []

    def path(self, host: str) -> str | None:
        """``host``'s namespace as a file, for a process that enters it itself (a forked worker)."""
        ns = self.namespaces.get(host)
        return str(NETNS_DIR / ns) if ns else None

    def close(self) -> list[str]:
        from perfkit.trainer.hosts.janitor import remove

        left = remove([{"kind": "netns", "value": n} for n in self.made])
        self.made.clear()
        return left

    def to_dict(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "reason": self.reason, "namespaces": dict(self.namespaces),
                "addresses": dict(self.addresses), "links": dict(self.links),
                "reachable_from_other_machines": self.mechanism != "netns"}


def shape(ns: str, dev: str, link: Link) -> None:
    """One root qdisc on ``dev``: tbf for bandwidth alone; netem when there is latency or loss."""
    if link.needs_netem:
        args = ["delay", f"{link.latency_ms or 0:g}ms"]
        if link.loss_pct:
            args += ["loss", f"{link.loss_pct:g}%"]
        if link.bandwidth_mbit:
            args += ["rate", f"{link.bandwidth_mbit:g}mbit"]
        _tc(ns, "qdisc", "add", "dev", dev, "root", "netem", *args)
    elif link.bandwidth_mbit:
        # The bucket holds at least 64 KiB (a whole GSO segment on veth) or 5 ms at the link's rate.
        burst = max(64 * 1024, int(link.bandwidth_mbit * 1e6 / 8 * 0.005))
        _tc(ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{link.bandwidth_mbit:g}mbit",
            "burst", str(burst), "latency", "100ms")


def qdisc(ns: str, dev: str) -> str:
    """``tc qdisc show`` of ``dev``, as the kernel reports what was applied."""
    return _tc(ns, "qdisc", "show", "dev", dev).strip()


def _shape_error(cluster: ClusterSpec, i: int, link: Link, exc: _Failed) -> str:
    where = f"{cluster.source or 'cluster'}: hosts[{i}].link"
    if link.needs_netem and "unknown" in str(exc).lower():
        keys = "/".join(k for k in ("latency_ms", "loss_pct") if getattr(link, k))
        return (f"{where}.{keys}: needs tc's netem qdisc, which this kernel does not have (tc: 'Specified qdisc "
                f"kind is unknown'; try `modprobe sch_netem`); bandwidth_mbit alone works (tbf)")
    return f"{where}: could not be shaped: {exc}"


def remove_stale() -> None:
    """Namespaces of launchers that are gone (a janitor that was killed too)."""
    from perfkit.trainer.hosts.janitor import remove

    try:
        names = [p.name for p in NETNS_DIR.iterdir()]
    except OSError:
        return
    stale = [n for n in names if (m := _NAME.match(n)) and not Path(f"/proc/{m.group(1)}").exists()]
    remove([{"kind": "netns", "value": n} for n in stale])


def netem_available() -> bool:
    """Whether this kernel has tc's netem qdisc (delay and loss), tried in a scratch namespace."""
    name = f"pkprobe{os.getpid()}x{next(_counter)}"
    _ip("netns", "add", name)
    try:
        return subprocess.run(["tc", "-n", name, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                              capture_output=True, timeout=30).returncode == 0
    finally:
        _ip("netns", "delete", name)
