"""Two processes started as a TF_CONFIG-setting scheduler would (a TFJob's chief and worker pods), each
`perfkit run --mode multi --cluster-from tf-config` with its own TF_CONFIG and one --run-id: each writes its
part, and `perfkit analyze DIR` merges them into one 2-worker run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.cluster import free_ports
from tests.integration._util import PERFKIT, meta
from tests.integration._util import perfkit as _perfkit

pytestmark = pytest.mark.integration


def test_two_pods_with_their_own_tf_config_form_one_run(tmp_path: Path) -> None:
    ports = free_ports(2)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    procs = []
    for kind in ("chief", "worker"):
        env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": kind, "index": 0}})}
        procs.append(subprocess.Popen([*PERFKIT, "run", "--mode", "multi", "--cluster-from", "tf-config",
                                       "--preset", "tiny", "--no-profile", "--quiet", "--run-id", "tfjob-1",
                                       "--results-dir", str(tmp_path)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outs]
    parts = {p.name: meta(p) for p in tmp_path.iterdir() if (p / "run.json").is_file()}
    assert set(parts) == {"tfjob-1--w0", "tfjob-1--w1"}, "the chief is worker 0"
    assert all(m["scheduler"] == "tf-config" and m["status"] == "complete" for m in parts.values())
    analysed = _perfkit("analyze", str(tmp_path), "--format", "json", "--no-html")
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    run = json.loads(analysed.stdout)["runs"][0]
    assert run["run_id"] == "tfjob-1" and run["workers"] == 2 and run["steady_epoch_s"] > 0


MANIFEST = Path(__file__).resolve().parents[2] / "examples" / "kubernetes" / "tfjob-launch.yaml"


def _commands(text: str) -> list[list[str]]:
    """Each container's ``command:`` of the manifest: a flow list of double-quoted strings, which is JSON."""
    return [json.loads(line.split("command:", 1)[1]) for line in text.splitlines()
            if line.strip().startswith("command:")]


def test_the_tfjob_launch_manifest_runs_a_script_against_its_baseline(tmp_path: Path) -> None:
    """examples/kubernetes/tfjob-launch.yaml as the operator would run it (kubectl is not here): its baseline
    Job's command once, then its TFJob's command in two 'pods', each with the TF_CONFIG the operator writes;
    the script is the custom-loop example in place of /app/train.py, the volume a folder in place of /results."""
    baseline, worker = _commands(MANIFEST.read_text())
    assert baseline[:2] == ["perfkit", "launch"] and "single" in baseline and worker[:4] == [
        "perfkit", "launch", "--cluster-from", "tf-config"]
    script = [sys.executable, str(MANIFEST.parents[1] / "custom_loop" / "train.py"), "--epochs", "2",
              "--steps-per-epoch", "10"]

    def pod(command: list[str]) -> list[str]:
        cut = command.index("--")
        flags = [str(tmp_path) if a == "/results" else a for a in command[2:cut]]
        return [*PERFKIT, "launch", *flags, "--no-profile", "--", *script]

    single = subprocess.run(pod(baseline), capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-2000:]
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = [subprocess.Popen(pod(worker), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster,
                                                                          "task": {"type": "worker", "index": i}})})
             for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outs]
    parts = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("tfjob-launch--"))
    assert parts == ["tfjob-launch--w0", "tfjob-launch--w1"]
    analysed = _perfkit("analyze", str(tmp_path), "--format", "json", "--no-html")
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    doc = json.loads(analysed.stdout)
    run = next(r for r in doc["runs"] if r["run_id"] == "tfjob-launch")
    assert run["workers"] == 2 and run["speedup"] > 0 and doc["baseline"]["run_id"] == "tfjob-launch-single"


def test_a_parameter_server_job_of_five_pods_forms_one_run(tmp_path: Path) -> None:
    """A TFJob with chief, two workers and a ps, each pod `perfkit launch --mode ps --cluster-from tf-config`
    with the operator's TF_CONFIG: the chief's part carries every worker's steps; analyze merges the parts."""
    ports = free_ports(4)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:3]],
               "ps": [f"127.0.0.1:{ports[3]}"]}
    script = [sys.executable, str(MANIFEST.parents[1] / "ps_training" / "train.py"), "--epochs", "2",
              "--steps-per-epoch", "10", "--units", "32"]
    procs = []
    for kind, index in (("ps", 0), ("worker", 0), ("worker", 1), ("chief", 0)):
        env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})}
        procs.append(subprocess.Popen([*PERFKIT, "launch", "--mode", "ps", "--cluster-from", "tf-config", "--quiet",
                                       "--run-id", "psjob-1", "--results-dir", str(tmp_path), "--", *script],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    # as text, each pod's own: a list of them is cut short in pytest's report
    said = "\n".join(f"pod {i} exit {p.returncode}: {e[-1500:]}" for i, (p, (_, e)) in enumerate(zip(procs, outs)))
    assert [p.returncode for p in procs] == [0, 0, 0, 0], said
    parts = {p.name: meta(p) for p in tmp_path.iterdir() if (p / "run.json").is_file()}
    assert set(parts) == {f"psjob-1--w{i}" for i in range(4)}  # workers 0-1, then the ps, then the chief
    assert parts["psjob-1--w3"]["strategy"] == "ParameterServerStrategy"
    analysed = _perfkit("analyze", str(tmp_path), "--format", "json", "--no-html")
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    a = json.loads(analysed.stdout)
    run = a["runs"][0]
    assert run["run_id"] == "psjob-1" and run["mode"] == "ps" and run["workers"] == 2 and run["samples"] == 20 * 256
    assert sorted(w["worker"] for w in a["workers"]) == [0, 1]
