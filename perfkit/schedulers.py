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

from perfkit.cluster import ROLES, ClusterSpec, HostSpec
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


def from_environment(source: str, env: Mapping[str, str], cores: float, base_port: int = DEFAULT_BASE_PORT,
                     ps: int = 0) -> Task:
    """``source``: auto, slurm or tf-config (``--cluster-from``); ``ps``: parameter servers among Slurm's
    tasks (ParameterServerStrategy; TF_CONFIG names its own)."""
    if source not in SOURCES:
        raise UsageError(f"--cluster-from: {source!r} is not one of {', '.join(SOURCES)}")
    chosen = detect(env) if source == "auto" else source
    if chosen is None:
        raise UsageError("--cluster-from auto: neither SLURM_PROCID/SLURM_STEP_NUM_TASKS nor TF_CONFIG is set; give "
                         "--workers N or --cluster FILE, or run under srun or a TF_CONFIG-setting scheduler")
    if chosen == "slurm":
        return from_slurm(env, cores, base_port, ps)
    if not env.get("TF_CONFIG"):
        raise UsageError("--cluster-from tf-config: TF_CONFIG is not set")
    return from_tf_config(env["TF_CONFIG"], cores)


def from_tf_config(text: str, cores: float) -> Task:
    """TF_CONFIG's cluster and this task. Without parameter servers: its ``chief`` (if any) and ``worker``
    tasks, in that order, as MultiWorkerMirroredStrategy's workers; with them (``ps``), a ParameterServerStrategy
    cluster of workers, parameter servers and a chief. ``evaluator`` is refused. ``cores``: this machine's,
    assumed of every host (TF_CONFIG does not say)."""
    try:
        cfg = json.loads(text)
        cluster, task = cfg["cluster"], cfg.get("task") or {}
        if not isinstance(cluster, dict):
            raise TypeError("'cluster' is not an object")
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"TF_CONFIG: not a TensorFlow cluster description ({exc})") from None
    others = sorted(set(cluster) - {"chief", "worker", "ps"})
    if others:
        raise UsageError(f"TF_CONFIG: task type(s) {', '.join(others)} are not supported (perfkit runs chief, "
                         f"worker and ps tasks)")
    chief, workers = list(cluster.get("chief") or []), list(cluster.get("worker") or [])
    if len(chief) > 1:
        raise UsageError(f"TF_CONFIG: {len(chief)} chief tasks; a cluster has at most one")
    kind, index = str(task.get("type", "")).lower(), task.get("index")
    roles = ("chief", "worker", "ps") if cluster.get("ps") else ("chief", "worker")
    if kind not in roles or not isinstance(index, int) or index < 0 or index >= len(cluster.get(kind) or []):
        raise UsageError(f"TF_CONFIG: task {task!r} is not one of the cluster's {'/'.join(roles)} tasks")
    if cluster.get("ps"):
        return _ps_task(cluster, kind, index, cores, text)
    endpoints = [*chief, *workers]
    hosts = _hosts([_split_endpoint(e) for e in endpoints], cores)
    me = index + (len(chief) if kind == "worker" else 0)
    return Task(ClusterSpec(hosts, source="TF_CONFIG"), me, None, "tf-config", tf_config=text)


def _ps_task(cluster: dict, kind: str, index: int, cores: float, text: str) -> Task:
    """A ParameterServerStrategy TF_CONFIG: each address a host running its workers, parameter servers and
    chief, split where keeping TF_CONFIG's order per role needs it (worker i stays worker task i)."""
    hosts: list[dict] = []
    for role in ROLES:
        last = 0
        for endpoint in cluster.get(role) or []:
            address, port = _split_endpoint(endpoint)
            h = next((k for k in range(last, len(hosts)) if hosts[k]["address"] == address), None)
            if h is None:
                hosts.append({"address": address, **{r: [] for r in ROLES}})
                h = len(hosts) - 1
            hosts[h][role].append(port)
            last = h
    seen: dict[str, int] = {}
    specs = []
    for h in hosts:
        seen[h["address"]] = seen.get(h["address"], 0) + 1
        base = sanitize_id(h["address"], "TF_CONFIG host")
        ports = tuple(h["worker"] + h["ps"] + h["chief"])
        specs.append(HostSpec(base if seen[h["address"]] == 1 else f"{base}-{seen[h['address']]}", h["address"],
                              cores, len(h["worker"]), ports[0], ports, ps=len(h["ps"]), chief=bool(h["chief"])))
    spec = ClusterSpec(tuple(specs), source="TF_CONFIG")
    me = next(t.index for t in spec.tasks if t.role == kind and t.task_index == index)
    return Task(spec, me, None, "tf-config", tf_config=text)


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


def from_slurm(env: Mapping[str, str], cores: float, base_port: int = DEFAULT_BASE_PORT, ps: int = 0) -> Task:
    """Slurm's task: its rank (``SLURM_PROCID``), the step's nodes and tasks per node (block distribution:
    ranks fill the first node, then the next), a port per task (``base_port`` + its local id); each host's
    budget is its tasks x ``SLURM_CPUS_PER_TASK`` when given, else this machine's cores. With ``ps`` > 0
    (ParameterServerStrategy) rank 0 is the chief, ranks 1..ps the parameter servers and the rest the workers,
    the order of TensorFlow's SlurmClusterResolver given jobs chief, ps, worker."""
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
    job, step = env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID")
    run_id = sanitize_id(f"slurm-{job}" + (f".{step}" if step else "")) if job else None
    budgets = [float(cpus) * k if cpus else cores for k in per_node]
    if ps:
        spec, me = _slurm_ps(nodes, per_node, budgets, base_port, ps, rank)
        return Task(spec, me, run_id, "slurm")
    hosts = tuple(HostSpec(sanitize_id(n, "SLURM_STEP_NODELIST"), n, b, k, base_port)
                  for n, k, b in zip(nodes, per_node, budgets))
    return Task(ClusterSpec(hosts, source="Slurm"), rank, run_id, "slurm")


def _slurm_ps(nodes: list[str], per_node: list[int], budgets: list[float], base_port: int, ps: int,
              rank: int) -> tuple[ClusterSpec, int]:
    """The ParameterServerStrategy cluster of a Slurm step and this rank's task in it."""
    total = sum(per_node)
    if total < ps + 2:
        raise UsageError(f"--ps {ps}: the Slurm step has {total} tasks; it needs the chief, {ps} parameter "
                         f"server(s) and at least one worker ({ps + 2} tasks)")

    def role(r: int) -> tuple[str, int]:
        return ("chief", 0) if r == 0 else ("ps", r - 1) if r <= ps else ("worker", r - 1 - ps)

    hosts, first = [], 0
    for node, k, budget in zip(nodes, per_node, budgets):
        mine = [(role(r), base_port + r - first) for r in range(first, first + k)]
        ports = tuple(p for want in ROLES for (kind, _), p in mine if kind == want)
        count = {want: sum(1 for (kind, _), _p in mine if kind == want) for want in ROLES}
        hosts.append(HostSpec(sanitize_id(node, "SLURM_STEP_NODELIST"), node, budget, count["worker"], ports[0],
                              ports, ps=count["ps"], chief=bool(count["chief"])))
        first += k
    spec = ClusterSpec(tuple(hosts), source="Slurm")
    kind, index = role(rank)
    return spec, next(t.index for t in spec.tasks if t.role == kind and t.task_index == index)


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

