"""``perfkit launch``'s flags when the workers run on the user's hosts over SSH: checked here, before any
host is contacted, and turned into what each host's ``perfkit launch`` is given."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from perfkit.cluster import check_mode, load_cluster
from perfkit.config import Mode
from perfkit.errors import UsageError
from perfkit.profiler.tracewindow import check_spec
from perfkit.schedulers import DEFAULT_BASE_PORT
from perfkit.trainer.options import ClusterFlags, RecordFlags, check_launch_flags, parse_hang_timeout, ps_profile_steps
from perfkit.trainer.remote.hosts import Remote, parse_hosts, ssh_cluster, with_ps
from perfkit.trainer.remote.launcher import AgentArgs

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def over_ssh(command: list[str], mode: Mode, flags: ClusterFlags, record: RecordFlags, hosts: str | None,
             env: list[str] | None, remote_perfkit: str,
             remote_results_dir: str | None) -> tuple[Any, AgentArgs, Remote] | None:
    """The cluster, each host's arguments and how to reach the hosts; None when the run is not over SSH
    (no --hosts, and no ssh targets in --cluster, or this is one host of it started by hand)."""
    cluster, host, task_index = flags.cluster, flags.host, flags.task_index
    spec = None
    if hosts is not None:
        if cluster is not None or flags.workers is not None or flags.cluster_from is not None:
            raise UsageError("--hosts: not with --workers/--cluster/--cluster-from (it names the hosts and their "
                             "workers itself)")
        spec = parse_hosts(hosts, flags.base_port or DEFAULT_BASE_PORT)
        spec = with_ps(spec, flags.ps or 1) if mode is Mode.ps else spec
    elif cluster is not None and mode is not Mode.single and host is None and task_index is None:
        loaded = load_cluster(cluster)
        spec = loaded if ssh_cluster(loaded) else None
    if spec is None:
        for name, value in (("--env", env), ("--remote-results-dir", remote_results_dir)):
            if value:
                raise UsageError(f"{name}: only with --hosts (or a cluster file with ssh targets)")
        if remote_perfkit != "perfkit":
            raise UsageError("--remote-perfkit: only with --hosts (or a cluster file with ssh targets)")
        return None
    if host is not None or task_index is not None:
        raise UsageError("--host/--task-index: not with --hosts (perfkit starts every host itself)")
    if flags.emulate:
        raise UsageError("--emulate: not with --hosts (real hosts are not emulated)")
    if flags.max_restarts:
        raise UsageError("--max-restarts: not with --hosts (each host runs one part of the cluster, which cannot "
                         "restart alone); leave it at 0")
    if mode is Mode.single and (len(spec.hosts) != 1 or spec.num_workers != 1):
        raise UsageError("--hosts: --mode single runs the command once: name one host without :SLOTS (the "
                         "baseline, e.g. --mode single --hosts h1)")
    if not command:
        raise UsageError("perfkit launch: give the command to run after '--', e.g. "
                         "perfkit launch --hosts h1,h2 -- python train.py")
    check_launch_flags(mode, record.sample_interval, record.auto_record, record.step_function)
    parse_hang_timeout(flags.hang_timeout)
    check_spec(record.profile_steps)
    named = tuple(_env(env or []))
    if mode is not Mode.single and any(name == "TF_CONFIG" for name, _ in named):
        raise UsageError(f"--env TF_CONFIG: perfkit sets each task's TF_CONFIG in --mode {mode.value}; name it only "
                         f"for a --mode single baseline of a script that needs one")
    if flags.ps is not None and (mode is not Mode.ps or hosts is None):
        raise UsageError("--ps: only with --mode ps and --workers or --hosts (a cluster file's hosts say ps = K)")
    if mode is Mode.ps:
        check_mode(spec, "ps")
        ps_profile_steps(record.profile_steps, flags.max_restarts)
    remote = Remote(remote_perfkit, remote_results_dir, str(Path.cwd()), named)
    args = AgentArgs(tuple(command), tuple(_agent_flags(mode, flags, record)), mode is not Mode.single, mode.value)
    return spec, args, remote


def _agent_flags(mode: Mode, flags: ClusterFlags, record: RecordFlags) -> list[str]:
    """The flags every host's part runs with, as the user gave them."""
    out = ["--mode", mode.value, "--connect-timeout", str(flags.connect_timeout),
           "--hang-timeout", str(flags.hang_timeout), "--sample-interval", str(record.sample_interval),
           "--profile-steps", str(record.profile_steps), "--pin" if flags.pin else "--no-pin"]
    if not record.auto_record:
        out.append("--no-auto-record")
    if record.step_function:
        out += ["--step-function", record.step_function]
    if record.label:
        out += ["--label", record.label]
    if flags.allow_unenforced:
        out.append("--allow-unenforced")
    return out


def _env(given: list[str]) -> list[tuple[str, str]]:
    """``--env NAME`` (its value here) or ``NAME=VALUE``."""
    out = []
    for item in given:
        name, eq, value = item.partition("=")
        if not _NAME.match(name):
            raise UsageError(f"--env: {item!r} is not NAME or NAME=VALUE (a variable name: letters, digits, '_')")
        if not eq:
            if name not in os.environ:
                raise UsageError(f"--env: {name} is not set in this shell; give {name}=VALUE")
            value = os.environ[name]
        out.append((name, value))
    return out
