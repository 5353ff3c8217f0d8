"""The cluster as a scheduler describes it: ``TF_CONFIG`` (Kubeflow's TFJob, Vertex AI, SageMaker, Ray Train)
or Slurm's variables, turned into perfkit's ``ClusterSpec`` and this process's task.

Under a scheduler every task is started by the scheduler, so perfkit starts only this task's worker.
TensorFlow's ``SlurmClusterResolver`` is not used: it asks ``nvidia-smi`` for GPUs and cannot be told a
CPU-only allocation (tensorflow/tensorflow#56894), so the cluster is built from Slurm's variables here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from perfkit.cluster import ClusterSpec, HostSpec
from perfkit.config import sanitize_id
from perfkit.errors import UsageError

SOURCES = ("auto", "slurm", "tf-config")
DEFAULT_BASE_PORT = 23456


@dataclass(frozen=True)
class Task:
    """This process's place in a scheduled cluster."""

    cluster: ClusterSpec
    index: int  # this task's worker index (the chief, when there is one, is worker 0)
    run_id: str | None  # the scheduler's job id: the default run id, the same in every task
    source: str  # "slurm" or "tf-config"
    tf_config: str | None = None  # tf-config: the scheduler's own TF_CONFIG, passed on to a user's command as is


def detect(env: Mapping[str, str]) -> str | None:
    """Which scheduler started this process: Slurm (a task of a job step), TF_CONFIG, or None."""
    if env.get("SLURM_PROCID") is not None and (env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")):
        return "slurm"
    return "tf-config" if env.get("TF_CONFIG") else None


def from_environment(source: str, env: Mapping[str, str], cores: float, base_port: int = DEFAULT_BASE_PORT) -> Task:
    """``source``: auto, slurm or tf-config (``--cluster-from``)."""
    if source not in SOURCES:
        raise UsageError(f"--cluster-from: {source!r} is not one of {', '.join(SOURCES)}")
    chosen = detect(env) if source == "auto" else source
    if chosen is None:
        raise UsageError("--cluster-from auto: neither SLURM_PROCID/SLURM_STEP_NUM_TASKS nor TF_CONFIG is set; give "
                         "--workers N or --cluster FILE, or run under srun or a TF_CONFIG-setting scheduler")
    if chosen == "slurm":
        return from_slurm(env, cores, base_port)
    if not env.get("TF_CONFIG"):
        raise UsageError("--cluster-from tf-config: TF_CONFIG is not set")
    return from_tf_config(env["TF_CONFIG"], cores)


def from_tf_config(text: str, cores: float) -> Task:
    """TF_CONFIG's ``chief`` (if any) and ``worker`` tasks, in that order; ``ps``/``evaluator`` are refused
    until perfkit has a parameter-server mode. ``cores``: this machine's, assumed of every host (TF_CONFIG
    does not say)."""
    try:
        cfg = json.loads(text)
        cluster, task = cfg["cluster"], cfg.get("task") or {}
        if not isinstance(cluster, dict):
            raise TypeError("'cluster' is not an object")
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"TF_CONFIG: not a TensorFlow cluster description ({exc})") from None
    others = sorted(set(cluster) - {"chief", "worker"})
    if others:
        raise UsageError(f"TF_CONFIG: task type(s) {', '.join(others)} are not supported (perfkit runs "
                         f"MultiWorkerMirroredStrategy: chief and worker only)")
    chief, workers = list(cluster.get("chief") or []), list(cluster.get("worker") or [])
    if len(chief) > 1:
        raise UsageError(f"TF_CONFIG: {len(chief)} chief tasks; a cluster has at most one")
    kind, index = str(task.get("type", "")).lower(), task.get("index")
    if kind not in ("chief", "worker") or not isinstance(index, int) or index < 0 or \
            index >= len(chief if kind == "chief" else workers):
        raise UsageError(f"TF_CONFIG: task {task!r} is not one of the cluster's chief/worker tasks")
    endpoints = [*chief, *workers]
    hosts = _hosts([_split_endpoint(e) for e in endpoints], cores)
    me = index + (len(chief) if kind == "worker" else 0)
    return Task(ClusterSpec(hosts, source="TF_CONFIG"), me, None, "tf-config", tf_config=text)


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    host, sep, port = str(endpoint).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"TF_CONFIG: endpoint {endpoint!r} is not host:port")
    return host, int(port)


def _hosts(endpoints: list[tuple[str, int]], cores: float) -> tuple[HostSpec, ...]:
    """One host per run of consecutive workers on the same address, so that worker i stays task i."""
    runs: list[tuple[str, list[int]]] = []
    for address, port in endpoints:
        if runs and runs[-1][0] == address:
            runs[-1][1].append(port)
        else:
            runs.append((address, [port]))
    seen: dict[str, int] = {}
    out = []
    for address, ports in runs:
        seen[address] = seen.get(address, 0) + 1
        base = sanitize_id(address, "TF_CONFIG host")
        name = base if seen[address] == 1 else f"{base}-{seen[address]}"
        out.append(HostSpec(name, address, cores, len(ports), ports[0], tuple(ports)))
    return tuple(out)


def from_slurm(env: Mapping[str, str], cores: float, base_port: int = DEFAULT_BASE_PORT) -> Task:
    """Slurm's task: its rank (``SLURM_PROCID``), the step's nodes and tasks per node (block distribution:
    ranks fill the first node, then the next), a port per task (``base_port`` + its local id); each host's
    budget is its tasks x ``SLURM_CPUS_PER_TASK`` when given, else this machine's cores."""
    def need(name: str) -> str:  # a job step's variable, else its job's (a batch script outside srun)
        value = env.get(name) or env.get(_JOB_LEVEL[name])
        if not value:
            raise UsageError(f"--cluster-from slurm: {name} is not set (run it as a task of srun or sbatch)")
        return value

    nodes = expand_hostlist(need("SLURM_STEP_NODELIST"))
    per_node = expand_counts(need("SLURM_STEP_TASKS_PER_NODE"))
    if len(per_node) != len(nodes):
        raise UsageError(f"SLURM_STEP_TASKS_PER_NODE: {len(per_node)} counts for {len(nodes)} nodes")
    total = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or sum(per_node))
    rank = _int(env, "SLURM_PROCID")
    if sum(per_node) != total or not 0 <= rank < total:
        raise UsageError(f"SLURM_PROCID {rank} / {total} tasks do not match SLURM_STEP_TASKS_PER_NODE {per_node}")
    if not 1 <= base_port <= 65535 - max(per_node):
        raise UsageError(f"--base-port: {base_port} leaves no room for {max(per_node)} ports per node")
    cpus = env.get("SLURM_CPUS_PER_TASK")
    hosts = tuple(HostSpec(sanitize_id(n, "SLURM_STEP_NODELIST"), n, float(cpus) * k if cpus else cores, k, base_port)
                  for n, k in zip(nodes, per_node))
    job, step = env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID")
    run_id = sanitize_id(f"slurm-{job}" + (f".{step}" if step else "")) if job else None
    return Task(ClusterSpec(hosts, source="Slurm"), rank, run_id, "slurm")


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env.get(name, ""))
    except ValueError:
        raise UsageError(f"{name}: {env.get(name)!r} is not an integer") from None


_JOB_LEVEL = {"SLURM_STEP_NODELIST": "SLURM_JOB_NODELIST", "SLURM_STEP_TASKS_PER_NODE": "SLURM_TASKS_PER_NODE"}
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list: ``node[01-03,07],login1`` -> node01, node02, node03, node07, login1."""
    out: list[str] = []
    for part in _top_level_split(text):
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", part)
        if not m:
            if "[" in part or "]" in part or not part:
                raise UsageError(f"SLURM_STEP_NODELIST: cannot read {text!r}")
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            rm = _RANGE.match(r)
            if not rm:
                raise UsageError(f"SLURM_STEP_NODELIST: cannot read the range {r!r} in {text!r}")
            lo, hi = rm.group(1), rm.group(2) or rm.group(1)
            out += [f"{prefix}{i:0{len(lo)}d}{suffix}" for i in range(int(lo), int(hi) + 1)]
    return out


def _top_level_split(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text.strip():
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur]


def expand_counts(text: str) -> list[int]:
    """Slurm's per-node counts: ``2(x3),1`` -> [2, 2, 2, 1]."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise UsageError(f"SLURM_STEP_TASKS_PER_NODE: cannot read {text!r}")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out

