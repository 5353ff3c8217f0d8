"""Is a task's server up? From outside the process: a TCP connect to a peer's port, or the listening
sockets of a local process's own network namespace."""

from __future__ import annotations

import errno
import socket
import threading
from pathlib import Path
from typing import Any

from perfkit._libc import enter_netns
from perfkit.cluster import ClusterSpec, WorkerSpec


def unreachable(peers: list[WorkerSpec], timeout: float = 1.0) -> list[WorkerSpec]:
    """Peers whose port accepts no TCP connection: their worker was never started (or is gone)."""
    out = []
    for w in peers:
        try:
            with socket.create_connection((w.address, w.port), timeout=timeout):
                pass
        except OSError:
            out.append(w)
    return out


def listening(pid: int, port: int) -> bool:
    """Whether a TCP socket listens on ``port`` in the network namespace of process ``pid``: its
    /proc/<pid>/net tables are that namespace's, so this sees into an emulated host's namespace too."""
    return _tcp_state(pid, port, "0A")  # TCP_LISTEN


def connected(pid: int, port: int) -> bool:
    """Whether a TCP connection to ``port`` is established in the network namespace of process ``pid``
    (listening on it, that process has a peer: under ParameterServerStrategy, the chief or a worker at work)."""
    return _tcp_state(pid, port, "01")  # TCP_ESTABLISHED


def _tcp_state(pid: int, port: int, state: str) -> bool:
    """Whether a socket on local ``port`` is in ``state`` (the kernel's hex code) in ``pid``'s namespace."""
    want = f":{port:04X}"
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[1].endswith(want) and fields[3] == state:
                return True
    return False


_NO_ANSWER = (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.ETIMEDOUT, None)  # None: timed out


def lost_links(env: Any, cluster: ClusterSpec, timeout: float = 2.0) -> list[tuple[str, str]]:
    """Pairs of emulated hosts with no TCP answer between them in the run's network (each host's namespace,
    ``HostEnv.sandbox``): a refused connection is an answer (the link works, the port is closed); a timeout
    or an unreachable host is none. Empty where there is no such network (one host, or no namespaces)."""
    from perfkit.trainer.hosts.netns import NETNS_DIR

    spaces = getattr(getattr(env, "sandbox", None), "namespaces", {}) or {}
    hosts = [h for h in dict.fromkeys(t.host for t in cluster.tasks) if h in spaces]
    lost = []
    for i, a in enumerate(hosts):
        for b in hosts[i + 1:]:
            target = next(t for t in cluster.tasks if t.host == b)
            if not _answers(str(NETNS_DIR / spaces[a]), target.address, target.port, timeout):
                lost.append((a, b))
    return lost


def _answers(netns: str, address: str, port: int, timeout: float) -> bool:
    """From inside ``netns`` (a thread of its own moves there), does ``address:port`` answer at all?"""
    result: dict[str, bool] = {}

    def probe() -> None:
        if not enter_netns(netns):
            result["ok"] = True  # cannot tell: never blame a link on a probe that could not run
            return
        try:
            with socket.create_connection((address, port), timeout=timeout):
                result["ok"] = True
        except ConnectionRefusedError:
            result["ok"] = True
        except OSError as exc:
            result["ok"] = exc.errno not in _NO_ANSWER

    thread = threading.Thread(target=probe, name="perfkit-link-probe", daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    return result.get("ok", False)
