"""The cluster from a scheduler's environment: TF_CONFIG as Kubeflow's TFJob writes it, Slurm's variables
with compressed host lists and per-node counts, and the one-line errors for what perfkit cannot run."""

from __future__ import annotations

import json
import re

import pytest

from perfkit.errors import UsageError
from perfkit.schedulers import detect, expand_counts, expand_hostlist, from_environment, from_slurm, from_tf_config

TFJOB = {"cluster": {"chief": ["job-chief-0.ns.svc:2222"],
                     "worker": ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"]},
         "task": {"type": "worker", "index": 1}, "environment": "cloud"}


def test_a_tfjob_tf_config_puts_the_chief_first_and_keeps_every_endpoint() -> None:
    task = from_tf_config(json.dumps(TFJOB), cores=4.0)
    assert task.index == 2 and task.source == "tf-config" and task.tf_config == json.dumps(TFJOB)
    assert [w.endpoint for w in task.cluster.workers] == ["job-chief-0.ns.svc:2222", "job-worker-0.ns.svc:2222",
                                                         "job-worker-1.ns.svc:2222"]
    chief = from_tf_config(json.dumps({**TFJOB, "task": {"type": "chief", "index": 0}}), 4.0)
    assert chief.index == 0


def test_a_parameter_server_tf_config_keeps_every_role_in_its_task_order() -> None:
    cfg = {"cluster": {"worker": ["a:1", "b:2", "a:3"], "ps": ["b:4"], "chief": ["a:5"]},
           "task": {"type": "ps", "index": 0}}
    task = from_tf_config(json.dumps(cfg), 2.0)
    tasks = [(t.role, t.task_index, t.endpoint) for t in task.cluster.tasks]
    assert tasks == [("worker", 0, "a:1"), ("worker", 1, "b:2"), ("worker", 2, "a:3"), ("ps", 0, "b:4"),
                     ("chief", 0, "a:5")]
    assert task.cluster.tasks[task.index].name == "ps 0"
    assert task.cluster.tf_config(task.index) == {"cluster": {k: cfg["cluster"][k] for k in ("worker", "ps", "chief")},
                                                   "task": {"type": "ps", "index": 0}}


def test_a_slurm_step_with_parameter_servers_puts_the_chief_and_ps_first_in_rank_order() -> None:
    env = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "5", "SLURM_STEP_NODELIST": "n[1-2]",
           "SLURM_STEP_TASKS_PER_NODE": "3,2"}
    task = from_slurm(env, 2.0, 23456, ps=1)
    roles = {(t.role, t.task_index): t.endpoint for t in task.cluster.tasks}
    assert roles == {("chief", 0): "n1:23456", ("ps", 0): "n1:23457", ("worker", 0): "n1:23458",
                     ("worker", 1): "n2:23456", ("worker", 2): "n2:23457"}
    assert task.cluster.tasks[task.index].name == "worker 1"  # rank 3: after the chief, one ps and worker 0
    with pytest.raises(UsageError, match="--ps 4: the Slurm step has 5 tasks"):
        from_slurm(env, 2.0, 23456, ps=4)


def test_workers_sharing_a_host_stay_in_task_order() -> None:
    cfg = {"cluster": {"worker": ["a:1", "a:2", "b:1", "a:3"]}, "task": {"type": "worker", "index": 3}}
    task = from_tf_config(json.dumps(cfg), 2.0)
    assert [(w.host, w.port) for w in task.cluster.workers] == [("a", 1), ("a", 2), ("b", 1), ("a-2", 3)]
    assert task.index == 3


@pytest.mark.parametrize(("cfg", "message"), [
    ({"cluster": {"worker": ["a:1"], "ps": ["p:1"]}, "task": {"type": "evaluator", "index": 0}},
     "not one of the cluster's chief/worker/ps tasks"),
    ({"cluster": {"worker": ["a:1"], "evaluator": ["e:1"]}, "task": {"type": "worker", "index": 0}}, "evaluator"),
    ({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}, "not one of the cluster"),
    ({"cluster": {"worker": ["nohost"]}, "task": {"type": "worker", "index": 0}}, "not host:port"),
    ({"task": {}}, "not a TensorFlow cluster description"),
])
def test_what_perfkit_cannot_run_is_one_line_naming_tf_config(cfg: dict, message: str) -> None:
    with pytest.raises(UsageError, match=f"^TF_CONFIG: .*{message}"):
        from_tf_config(json.dumps(cfg), 2.0)


@pytest.mark.parametrize(("text", "hosts"), [
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("login1,gpu[8-10]", ["login1", "gpu8", "gpu9", "gpu10"]),
    ("n[1-2]-ib,x", ["n1-ib", "n2-ib", "x"]),
    ("single", ["single"]),
])
def test_slurm_host_lists_expand(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


def test_slurm_counts_expand_and_bad_ones_are_named() -> None:
    assert expand_counts("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(UsageError, match="SLURM_STEP_TASKS_PER_NODE"):
        expand_counts("2(y3)")
    with pytest.raises(UsageError, match="SLURM_STEP_NODELIST"):
        expand_hostlist("node[01-")


SLURM = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "c[1-2]",
         "SLURM_STEP_TASKS_PER_NODE": "3,1", "SLURM_LOCALID": "0", "SLURM_CPUS_PER_TASK": "2", "SLURM_JOB_ID": "812",
         "SLURM_STEP_ID": "1"}


def test_a_slurm_task_knows_its_node_port_budget_and_the_jobs_run_id() -> None:
    task = from_slurm(SLURM, cores=16.0, base_port=30000)
    assert [(w.host, w.port) for w in task.cluster.workers] == [("c1", 30000), ("c1", 30001), ("c1", 30002),
                                                               ("c2", 30000)]
    assert task.index == 3 and task.cluster.workers[3].host == "c2"
    assert [h.cores for h in task.cluster.hosts] == [6.0, 2.0] and task.run_id == "slurm-812.1"
    assert detect(SLURM) == "slurm" and detect({"TF_CONFIG": "{}"}) == "tf-config" and detect({}) is None


def test_slurm_variables_that_disagree_or_are_missing_are_named() -> None:
    with pytest.raises(UsageError, match="SLURM_PROCID 3 / 4 tasks do not match"):
        from_slurm({**SLURM, "SLURM_STEP_TASKS_PER_NODE": "2,1"}, 2.0)
    env = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_NODELIST"}
    with pytest.raises(UsageError, match="SLURM_STEP_NODELIST is not set"):
        from_slurm(env, 2.0)
    with pytest.raises(UsageError, match="neither SLURM_PROCID"):
        from_environment("auto", {}, 2.0)
    with pytest.raises(UsageError, match="--cluster-from: 'k8s' is not one of auto, slurm, tf-config"):
        from_environment("k8s", {}, 2.0)


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--cluster-from", "k8s"], {}, "--cluster-from: 'k8s' is not one of auto, slurm, tf-config"),
    (["--cluster-from", "slurm"], {}, "SLURM_STEP_NODELIST is not set"),
    (["--cluster-from", "slurm", "--workers", "2"], {}, "--cluster-from: not with --workers"),
    (["--base-port", "3000", "--workers", "2"], {}, "--base-port: only with --cluster-from slurm"),
    ([], {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"], "ps": ["b:1"]},
                                   "task": {"type": "worker", "index": 0}})},
     "TF_CONFIG: ps and chief are for --mode ps"),
])
def test_scheduler_flags_fail_in_one_line_before_anything_starts(
        tmp_path, capsys, monkeypatch, args: list[str], env: dict[str, str], message: str) -> None:  # type: ignore[no-untyped-def]
    from perfkit.cli import main

    for name in ("TF_CONFIG", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["run", "--mode", "multi", "--preset", "tiny", "--results-dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err
    assert not tmp_path.exists() or not list(tmp_path.iterdir())
