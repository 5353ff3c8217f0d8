"""The system OpenSSH client, as perfkit uses it to reach a user's hosts.

perfkit does not speak SSH itself: the user's ``ssh`` already knows their keys, agent, ``~/.ssh/config``
(aliases, jump hosts, ports) and known hosts, which a library of our own would have to re-read and would get
subtly wrong (as ``horovodrun -H``, ``deepspeed --hostfile`` and ``pdsh`` also rely on it). Every call is
non-interactive (BatchMode: a key or an agent, never a password prompt) and times out: a dead host is named
within seconds, not when TCP gives up.

A remote command is one string for the remote shell; every argument is quoted on its own (``shlex.quote``)
so a path or argument with spaces, quotes or ``;`` arrives as itself.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

CONNECT_TIMEOUT_S = 10
# The client gives up on a silent server after ALIVE_S x ALIVE_COUNT seconds (a dropped link), so a lost host
# is seen by the launcher about as fast as its own watchdog sees the launcher gone (agent.py).
ALIVE_S, ALIVE_COUNT = 2, 3
SSH_FAILED = 255  # ssh's own exit status: no connection, refused key, lost link


@dataclass(frozen=True)
class Target:
    """One host as ssh reaches it: what ssh is given, and its name in the cluster."""

    ssh: str  # host, user@host or a ~/.ssh/config alias
    name: str

    def argv(self, remote: str, tty: bool = False) -> list[str]:
        """``ssh`` running ``remote`` (already quoted) on this host."""
        opts = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
                "-o", f"ServerAliveInterval={ALIVE_S}", "-o", f"ServerAliveCountMax={ALIVE_COUNT}",
                "-o", "LogLevel=ERROR"]  # ssh's own banners and warnings would be mixed into the records' stream
        return ["ssh", *opts, "-T" if not tty else "-t", self.ssh, "--", remote]


def remote_command(argv: Sequence[str], cwd: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """``argv`` for the remote shell: each argument quoted, run in ``cwd`` with only ``env`` added."""
    parts = []
    if cwd is not None:
        parts.append(f"cd -- {shlex.quote(cwd)} &&")
    parts.append("exec")
    if env:
        parts += ["env", *(shlex.quote(f"{k}={v}") for k, v in env.items())]
    parts += [shlex.quote(a) for a in argv]
    return " ".join(parts)


def resolve_address(ssh: str) -> str:
    """The address ssh would connect to for ``ssh`` (an alias's HostName, without ``user@``), from
    ``ssh -G``, which only reads the configuration; TensorFlow's peers reach the host there."""
    try:
        out = subprocess.run(["ssh", "-G", ssh], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ssh.rsplit("@", 1)[-1]
    for line in out.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "hostname" and value.strip():
            return value.strip()
    return ssh.rsplit("@", 1)[-1]


def why_not(target: Target, code: int, stderr: str, program: str) -> str:
    """One line for a failed ssh call: unreachable, key refused, program missing, or its own last words."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else f"exit status {code}"
    low = stderr.lower()
    where = f"host {target.name} ({target.ssh})"
    if code == SSH_FAILED and "permission denied" in low:
        return (f"{where}: SSH refused the key ({last}); add your public key to its ~/.ssh/authorized_keys or name "
                f"an IdentityFile for it in ~/.ssh/config (perfkit never asks for a password)")
    if code == SSH_FAILED and "host key verification failed" in low:
        return f"{where}: its host key is not known ({last}); connect once with ssh {target.ssh} to accept it"
    if code == SSH_FAILED:
        return f"{where}: unreachable over SSH ({last}); check the name, its ssh entry and that sshd runs there"
    if code in (126, 127) or "not found" in low or "no such file or directory" in low:
        return (f"{where}: {program!r} was not found there ({last}); install perfkit on that host or give its "
                f"path with --remote-perfkit")
    return f"{where}: {last}"
