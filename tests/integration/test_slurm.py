"""perfkit under a real Slurm (.ci/slurm-up starts a one-node one): `srun -n 2 perfkit run --mode multi
--cluster-from slurm` writes both tasks' parts under the job step's run id and `perfkit analyze` merges them
against a single-mode baseline; examples/slurm/compare.sbatch does the same as one job (`sbatch --wait`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration._util import meta
from tests.integration._util import perfkit as _perfkit

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TINY = ["--preset", "tiny", "--no-profile", "--quiet"]


def _slurm_up() -> str | None:
    """Why Slurm cannot be used here, or None."""
    if shutil.which("srun") is None or shutil.which("sinfo") is None:
        return "no srun/sinfo on PATH (.ci/slurm-up installs and starts a one-node Slurm)"
    state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=30)
    if state.returncode != 0 or not any(s in state.stdout for s in ("idle", "mixed", "allocated")):
        return f"Slurm is installed but no node is up: {(state.stderr or state.stdout).strip()[:200]}"
    return None


_WHY = _slurm_up()
if _WHY is not None and os.environ.get("PERFKIT_REQUIRE_SLURM"):  # CI started one: its absence is a failure
    raise RuntimeError(f"PERFKIT_REQUIRE_SLURM is set but {_WHY}")
pytestmark = [pytestmark, pytest.mark.skipif(_WHY is not None, reason=str(_WHY))]


def _env() -> dict[str, str]:
    """Tasks run this interpreter's perfkit: its virtualenv first on PATH (srun passes the environment on)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("TF_CONFIG", None)
    return env


def test_srun_two_tasks_write_one_run_that_analyze_merges(tmp_path: Path) -> None:
    base = _perfkit("run", "--mode", "single", *TINY, "--results-dir", str(tmp_path), timeout=300)
    assert base.returncode == 0, base.stderr[-2000:]
    proc = subprocess.run(["srun", "--ntasks=2", "--time=10", sys.executable, "-m", "perfkit", "run", "--mode",
                           "multi", "--cluster-from", "slurm", *TINY, "--results-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    parts = sorted(p for p in tmp_path.iterdir() if "--w" in p.name)
    assert [p.name.rsplit("--", 1)[1] for p in parts] == ["w0", "w1"], list(tmp_path.iterdir())
    rid = meta(parts[0])["run_id"]
    assert rid.startswith("slurm-") and meta(parts[1])["run_id"] == rid, "one run id for the job step"
    for i, part in enumerate(parts):
        m = meta(part)
        assert m["status"] == "complete" and m["scheduler"] == "slurm" and m["part"]["workers"] == [i]
        assert (part / "workers" / str(i) / "steps.parquet").is_file()
    analysed = _perfkit("analyze", str(tmp_path), "--format", "json", "--no-html")
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    doc = json.loads(analysed.stdout)
    multi = next(r for r in doc["runs"] if r["run_id"] == rid)
    assert multi["workers"] == 2 and multi["speedup"] > 0 and doc["baseline"]["run_id"].endswith("-single")


def test_the_example_batch_script_runs_baseline_multi_and_analysis_as_one_job(tmp_path: Path) -> None:
    env = {**_env(), "RESULTS": str(tmp_path / "results"), "PRESET": "tiny", "PERFKIT_ARGS": "--no-profile"}
    proc = subprocess.run(["sbatch", "--wait", "--ntasks=2", "--time=15", f"--chdir={tmp_path}",
                           str(ROOT / "examples" / "slurm" / "compare.sbatch")],
                          capture_output=True, text=True, timeout=900, env=env)
    logs = sorted(tmp_path.glob("perfkit-compare-*.out"))
    text = logs[0].read_text() if logs else ""
    assert proc.returncode == 0, f"{proc.stderr[-1000:]}\n{text[-3000:]}"
    assert "Verdict" in text and "speedup" in text, text[-3000:]
    runs = {meta(p)["mode"] for p in (tmp_path / "results").iterdir() if (p / "run.json").is_file()}
    assert runs == {"single", "multi"}


def test_srun_launches_a_users_script_once_per_task_with_its_own_tf_config(tmp_path: Path) -> None:
    script = ROOT / "examples" / "own_script" / "train.py"
    proc = subprocess.run(["srun", "--ntasks=2", "--time=10", sys.executable, "-m", "perfkit", "launch",
                           "--cluster-from", "slurm", "--no-profile", "--quiet", "--results-dir", str(tmp_path), "--",
                           sys.executable, str(script), "--epochs", "2", "--samples", "6000", "--global-batch", "128"],
                          capture_output=True, text=True, timeout=600, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    parts = sorted(p for p in tmp_path.iterdir() if "--w" in p.name)
    assert len(parts) == 2 and all(meta(p)["launch"]["recorded"] for p in parts)
    analysed = _perfkit("analyze", str(tmp_path), "--format", "json", "--no-html")
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    run = json.loads(analysed.stdout)["runs"][0]
    assert run["workers"] == 2 and run["steady_epoch_s"] > 0 and run["run_id"] == meta(parts[0])["run_id"]
