"""Two processes started as a TF_CONFIG-setting scheduler would (a TFJob's chief and worker pods), each
`perfkit run --mode multi --cluster-from tf-config` with its own TF_CONFIG and one --run-id: each writes its
part, and `perfkit analyze DIR` merges them into one 2-worker run."""

from __future__ import annotations

import json
import os
import subprocess
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
