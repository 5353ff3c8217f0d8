"""Is a task's server up? From outside the process: a TCP connect to a peer's port, or the listening
sockets of a local process's own network namespace."""

from __future__ import annotations

import socket
from pathlib import Path

from perfkit.cluster import WorkerSpec


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
    want = f":{port:04X}"
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[1].endswith(want) and fields[3] == "0A":  # 0A: TCP_LISTEN
                return True
    return False
