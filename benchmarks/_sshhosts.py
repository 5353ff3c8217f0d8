"""Two hosts reachable over real SSH, made here (as root) for ``bench hosts`` and the tests: two network
namespaces joined by a veth pair, each with its own address and its own OpenSSH server (Debian's sshd, a host
key and an authorized key generated here), and an ``ssh`` on PATH that uses a client configuration of its own
(the user's own ``ssh``, as perfkit expects, with that file instead of ~/.ssh/config)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

ADDRESSES = {"east": "10.251.9.1", "west": "10.251.9.2"}
NO_PERFKIT_PORT = 2222  # west's second sshd, whose PATH has no perfkit: the bad-input case


@dataclass(frozen=True)
class Hosts:
    folder: Path
    namespaces: dict[str, str]  # host -> namespace name
    links: dict[str, str]  # host -> its end of the veth pair
    env: dict[str, str]  # the launching process's environment: PATH with the test's ssh first

    def on(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run on ``host`` (inside its namespace), as a process of that host would be."""
        return ["ip", "netns", "exec", self.namespaces[host], *argv]

    def link(self, host: str, up: bool) -> None:
        _ip("-n", self.namespaces[host], "link", "set", self.links[host], "up" if up else "down")

    def pids(self, host: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.namespaces[host]], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def left(self) -> dict[str, list[str]]:
        """What still runs on each host besides its sshd: nothing perfkit started may outlive it."""
        out = {}
        for host in self.namespaces:
            cmds = []
            for pid in self.pids(host):
                try:
                    cmd = " ".join(psutil.Process(pid).cmdline())
                except psutil.Error:
                    continue
                if not cmd.startswith("sshd:"):
                    cmds.append(cmd[:160])
            out[host] = cmds
        return out

    def emptied(self, limit: float, host: str | None = None) -> float | None:
        """Seconds until nothing but sshd runs on ``host`` (every host: None), or None after ``limit``."""
        start = time.monotonic()
        while time.monotonic() - start < limit:
            left = self.left()
            if not (left[host] if host else any(left.values())):
                return time.monotonic() - start
            time.sleep(0.1)
        return None

    def training(self, host: str, argv0: str, timeout: float = 120.0, cpu_s: float = 3.0) -> int:
        """The pid of the process on ``host`` started as ``argv0 ...`` once it used ``cpu_s`` of CPU (it trains)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid in self.pids(host):
                try:
                    proc = psutil.Process(pid)
                    if proc.cmdline()[:2] == [sys.executable, argv0] and proc.cpu_times().user > cpu_s:
                        return pid
                except (psutil.Error, IndexError):
                    continue
            time.sleep(0.3)
        raise RuntimeError(f"no training process on {host} within {timeout:g} s: {self.left()}")

    def launcher(self, pid: int) -> psutil.Process:
        """The launching ``perfkit launch`` process started as ``pid`` (``ip netns exec`` execs it)."""
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        return next(p for p in procs if "launch" in p.cmdline() and "--agent" not in p.cmdline()
                    and not p.cmdline()[0].endswith("ssh"))


def missing() -> str | None:
    """What these hosts need and this machine lacks, or None (namespaces need root: checked by the caller)."""
    for tool in ("ip", "sshd", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return (f"{tool} is not installed: apt-get install iproute2 openssh-server openssh-client "
                    "(what .ci/run does)")
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


@contextlib.contextmanager
def two_hosts(folder: Path) -> Iterator[Hosts]:
    tag = f"pks{os.getpid() % 100000}"
    names = {h: f"{tag}{h}" for h in ADDRESSES}
    links = {"east": f"{tag}e", "west": f"{tag}w"}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for ns in names.values():
            _ip("netns", "add", ns)
        _ip("link", "add", links["east"], "type", "veth", "peer", "name", links["west"])
        for host, dev in links.items():
            _ip("link", "set", dev, "netns", names[host])
            _ip("-n", names[host], "addr", "add", f"{ADDRESSES[host]}/24", "dev", dev)
            _ip("-n", names[host], "link", "set", dev, "up")
            _ip("-n", names[host], "link", "set", "lo", "up")
        env = _keys_and_client(folder)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        venv = str(Path(sys.executable).parent)
        for host, ns in names.items():
            procs.append(_sshd(folder, host, ns, 22, f"{venv}:/usr/local/bin:/usr/bin:/bin"))
        procs.append(_sshd(folder, "west-bare", names["west"], NO_PERFKIT_PORT, "/usr/local/bin:/usr/bin:/bin"))
        _wait_up(folder, names, env)
        yield Hosts(folder, names, links, env)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        for ns in names.values():
            for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), 9)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _keys_and_client(folder: Path) -> dict[str, str]:
    for name in ("host_key", "client_key", "stranger_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True)
    shutil.copy(folder / "client_key.pub", folder / "authorized_keys")
    kind, key = (folder / "host_key.pub").read_text().split()[:2]
    known = ([f"{a} {kind} {key}" for a in ADDRESSES.values()]
             + [f"[{ADDRESSES['west']}]:{NO_PERFKIT_PORT} {kind} {key}"])
    (folder / "known_hosts").write_text("\n".join(known) + "\n")
    # The hosts by name (aliases, as a user's ~/.ssh/config has them): perfkit reads their addresses with ssh -G.
    (folder / "ssh_config").write_text(
        f"Host east\n  HostName {ADDRESSES['east']}\nHost west\n  HostName {ADDRESSES['west']}\n"
        f"Host west-bare\n  HostName {ADDRESSES['west']}\n  Port {NO_PERFKIT_PORT}\n"
        f"Host west-nokey\n  HostName {ADDRESSES['west']}\n  IdentityFile {folder / 'stranger_key'}\n"
        f"Host * !west-nokey\n  IdentityFile {folder / 'client_key'}\n"
        f"Host *\n  IdentitiesOnly yes\n  User root\n"
        f"  UserKnownHostsFile {folder / 'known_hosts'}\n  StrictHostKeyChecking yes\n")
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f"#!/bin/sh\nexec /usr/bin/ssh -F {folder / 'ssh_config'} \"$@\"\n")
    (bin_dir / "ssh").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}


def _sshd(folder: Path, host: str, ns: str, port: int, path: str) -> subprocess.Popen[bytes]:
    address = ADDRESSES[host.split("-")[0]]
    cfg = folder / f"sshd_{host}.conf"
    cfg.write_text(f"ListenAddress {address}:{port}\nHostKey {folder / 'host_key'}\nPidFile {folder / host}.pid\n"
                   f"AuthorizedKeysFile {folder / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
                   f"PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                   f"SetEnv PATH={path}\n")
    return subprocess.Popen(["ip", "netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)],
                            stdout=open(folder / f"sshd_{host}.log", "ab"), stderr=subprocess.STDOUT)


def _wait_up(folder: Path, names: dict[str, str], env: dict[str, str], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    for host, address in ADDRESSES.items():
        while True:
            probe = subprocess.run(["ip", "netns", "exec", names["east"], "ssh", address, "true"],
                                   capture_output=True, text=True, env=env, timeout=30)
            if probe.returncode == 0:
                break
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in folder.glob("sshd_*.log"))
                raise RuntimeError(f"sshd on {host} did not answer within {timeout:g} s: {probe.stderr}\n{logs}")
            time.sleep(0.3)
