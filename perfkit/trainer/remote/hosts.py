"""The user's hosts before anything starts on them: ``--hosts h1,h2:SLOTS`` or a cluster file's ``ssh``
targets turned into a cluster, and what each host answers when its session opens (``agent.host_info``, all
hosts at once, before any of them starts a worker): perfkit's version, its cores, its results directory
(shared with this host's or not), the command's program and the ports its workers will take. Anything wrong
is one line naming the host and what to do.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfkit.cluster import SSH_TARGET, UNKNOWN_CORES, ClusterSpec, HostSpec, check_consistent
from perfkit.config import sanitize_id
from perfkit.errors import UsageError
from perfkit.trainer.remote.ssh import CONNECT_TIMEOUT_S, Target, resolve_address, why_not

_SLOTS = re.compile(r"^[1-9][0-9]{0,3}$")
MARKER = ".perfkit-shared-"  # a file this host writes into its results directory to see whether a host shares it
READY_S = CONNECT_TIMEOUT_S + 50  # ssh's connect timeout, then perfkit's start-up (no TensorFlow import)


@dataclass(frozen=True)
class Remote:
    """How this run reaches its hosts: the perfkit to run there and where each host keeps its records."""

    perfkit: str = "perfkit"  # on the host's PATH over SSH, or a path (--remote-perfkit)
    results_dir: str | None = None  # None: the launching host's own (absolute) path; "{host}" is replaced
    cwd: str = "."
    env: tuple[tuple[str, str], ...] = ()  # only these (--env NAME) travel with the command

    def results_for(self, host: str, local: Path) -> str:
        return (self.results_dir or str(local.resolve())).replace("{host}", host)


@dataclass(frozen=True)
class Host:
    """One host as it answered before the run: its target, cores and where its records are."""

    target: Target
    cores: float
    results_dir: str  # on the host
    shared: bool  # its results directory is this host's (a shared file system): nothing to bring back
    versions: dict[str, Any]


def parse_hosts(text: str, base_port: int) -> ClusterSpec:
    """``h1,h2:2,user@h3``: one host each, ``:SLOTS`` workers (default 1), every host reached over SSH."""
    hosts, seen = [], set()
    for item in [s.strip() for s in text.split(",")]:
        if not item:
            raise UsageError(f"--hosts: {text!r} has an empty entry; give host[:SLOTS],host[:SLOTS]...")
        target, _, slots = item.partition(":")
        if slots and not _SLOTS.match(slots):
            raise UsageError(f"--hosts: {item!r}: the slot count {slots!r} is not a positive integer (workers on "
                             f"that host)")
        if not SSH_TARGET.match(target):  # never an option to ssh (a leading '-'), nor a shell word
            raise UsageError(f"--hosts: {target!r} is not an SSH target (host, user@host or a ~/.ssh/config alias)")
        name = sanitize_id(target.rsplit("@", 1)[-1], "--hosts")
        if name in seen:
            raise UsageError(f"--hosts: host {name!r} is named twice; give it once with :SLOTS workers")
        seen.add(name)
        hosts.append(HostSpec(name, resolve_address(target), UNKNOWN_CORES, int(slots or 1), base_port, ssh=target))
    spec = ClusterSpec(tuple(hosts), source="--hosts")
    check_consistent(Path("--hosts"), spec)
    return spec


def with_ps(spec: ClusterSpec, ps: int) -> ClusterSpec:
    """``--mode ps --hosts``: the chief and ``ps`` parameter servers on the first host, beside its workers."""
    if ps < 1:
        raise UsageError("--ps: must be at least 1")
    first = replace(spec.hosts[0], ps=ps, chief=True)
    return ClusterSpec((first, *spec.hosts[1:]), source=spec.source)


def ssh_cluster(spec: ClusterSpec) -> bool:
    """Whether ``spec`` is started over SSH: every host names its target, or none does."""
    given = [h.name for h in spec.hosts if h.ssh]
    if given and len(given) != len(spec.hosts):
        missing = next(h.name for h in spec.hosts if not h.ssh)
        raise UsageError(f"{spec.source}: host {missing!r} has no ssh target while others have; give every host "
                         f"ssh = \"...\" (or none, and start each host with --host)")
    return bool(given)


def marker(local_results: Path) -> Path:
    """A file of this run in this host's results directory: a host that sees it shares the directory."""
    local_results.mkdir(parents=True, exist_ok=True)
    path = local_results / f"{MARKER}{secrets.token_hex(8)}"
    path.write_text("")
    return path


def answered(target: Target, info: dict[str, Any], program: str) -> Host:
    """A host's ``ready`` answer (``agent.host_info``), checked: one line naming the host for what is wrong."""
    try:
        return _checked(target, info, program)
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"host {target.name} ({target.ssh}): its perfkit answered {str(info)[:200]!r}, not what this "
                         f"host's perfkit expects; install the same version on every host") from None


def failed_early(target: Target, code: int, stderr: str, remote: Remote) -> str:
    """Why a host's session ended before it answered: no SSH, no perfkit, no working directory."""
    if code not in (0, 255) and ("can't cd" in stderr or "cd:" in stderr):
        return (f"host {target.name} ({target.ssh}): the working directory {remote.cwd} does not exist there; run "
                f"perfkit launch from a directory every host has")
    return why_not(target, code, stderr, remote.perfkit)


def with_cores(spec: ClusterSpec, answers: list[Host]) -> ClusterSpec:
    """Each host's cores as it said them, where the cluster gave none."""
    hosts = tuple(replace(h, cores=h.cores or a.cores) for h, a in zip(spec.hosts, answers))
    return ClusterSpec(hosts, spec.source)


def same_versions(answers: list[Host], here: str | None = None) -> None:
    """Every host runs this host's perfkit: a part recorded by another version may not read back the same."""
    from perfkit.machine import versions

    here = here or versions()["perfkit"]
    for h in answers:
        if h.versions.get("perfkit") != here:
            raise UsageError(f"host {h.target.name} ({h.target.ssh}) runs perfkit {h.versions.get('perfkit')}, this "
                             f"host {here}: install the same version on every host")


def _checked(target: Target, info: dict[str, Any], program: str) -> Host:
    where = f"host {target.name} ({target.ssh})"
    if not info.get("program"):
        raise UsageError(f"{where}: command: {program!r} is not an executable on its PATH or a file in the working "
                         f"directory")
    if info.get("busy_ports"):
        port = info["busy_ports"][0]
        raise UsageError(f"{where}: port {port} is taken there (by {info.get('port_owner') or 'another process'}); "
                         f"give another --base-port")
    if info.get("results_error"):
        raise UsageError(f"{where}: its results directory {info['results_dir']} cannot be written: "
                         f"{info['results_error']}; give --remote-results-dir")
    return Host(target, float(info["cores"]), str(info["results_dir"]), bool(info.get("shared")),
                dict(info.get("versions") or {}))
