"""A run's janitor: removes what the run made on this machine (network namespaces, cgroups, temporary
folders) once the run's process is gone, however it went; SIGKILL included, where no handler runs.

``Janitor.start()`` launches ``python -m perfkit.trainer.hosts.janitor`` in its own session (a terminal's hangup
or a signal to perfkit's process group does not reach it) and ignoring SIGINT/SIGTERM/SIGHUP. The launcher
tells it each thing as soon as it is made, one JSON line each on a pipe. When the pipe closes (the launcher
finished, or died) the janitor kills whatever still runs inside those namespaces and cgroups, removes them,
and exits. On a normal finish the launcher has already removed everything and the janitor finds nothing.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

KINDS = ("netns", "cgroup", "dir", "glob")  # glob: temporary folders whose names are not known ahead
EMPTY_WAIT_S = 10.0


class Janitor:
    """The launcher's side: start the helper, register things, close (then wait for it to finish)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self.items: list[dict[str, str]] = []

    def start(self) -> None:
        # "--for PID" names the launcher it serves (in ps, and for tests that look for one run's janitor)
        argv = [sys.executable, "-m", "perfkit.trainer.hosts.janitor", "--for", str(os.getpid())]
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)

    def register(self, kind: str, value: str | Path) -> None:
        item = {"kind": kind, "value": str(value)}
        self.items.append(item)
        if self._proc is not None and self._proc.stdin is not None:
            try:
                self._proc.stdin.write((json.dumps(item) + "\n").encode())
                self._proc.stdin.flush()
            except OSError as exc:  # it died: the launcher still cleans up on its own normal paths
                log.warning("the run's janitor is gone (%s); %s %s is removed only by this process", exc, kind, value)

    def close(self, timeout: float = 30.0) -> None:
        """Let it check (and remove) everything registered, and wait for it; never longer than ``timeout``."""
        if self._proc is None:
            return
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.error("the run's janitor (pid %d) did not finish within %.0f s", self._proc.pid, timeout)
        self._proc = None


def remove(items: list[dict[str, str]]) -> list[str]:
    """Kill what runs inside each registered namespace and cgroup, then remove them all; what could not be."""
    netns = [i["value"] for i in items if i.get("kind") == "netns"]
    groups = [Path(i["value"]) for i in items if i.get("kind") == "cgroup"]
    for name in netns:
        _kill(_netns_pids(name))
    for group in groups:
        _kill(_cgroup_pids(group))
    left = []
    for group in groups:
        deadline = time.monotonic() + EMPTY_WAIT_S
        while group.exists() and _cgroup_pids(group) and time.monotonic() < deadline:
            time.sleep(0.1)
        try:
            group.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            left.append(f"cgroup {group}: {exc.strerror or exc}")
    for name in reversed(netns):  # host namespaces before the hub their links lead to
        left += delete_netns(name)
    for item in items:
        if item.get("kind") == "dir":
            shutil.rmtree(item["value"], ignore_errors=True)
        elif item.get("kind") == "glob":
            pattern = Path(item["value"])
            for path in pattern.parent.glob(pattern.name):
                shutil.rmtree(path, ignore_errors=True)
    return left


def delete_netns(name: str) -> list[str]:
    if not Path("/run/netns", name).exists():
        return []
    done = subprocess.run(["ip", "netns", "delete", name], capture_output=True, text=True, timeout=30)
    return [f"netns {name}: {done.stderr.strip()}"] if done.returncode else []


def _netns_pids(name: str) -> list[int]:
    if not Path("/run/netns", name).exists():
        return []
    done = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=30)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def _cgroup_pids(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill(pids: list[int]) -> None:
    for pid in pids:
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _read_items(stream: IO[bytes]) -> list[dict[str, Any]]:
    items = []
    for line in stream:  # until the launcher closes the pipe, or dies
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and item.get("kind") in KINDS and isinstance(item.get("value"), str):
            items.append(item)
    return items


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    left = remove(_read_items(sys.stdin.buffer))
    for line in left:
        print(f"perfkit janitor: could not remove {line}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
