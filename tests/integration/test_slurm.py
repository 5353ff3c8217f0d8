"""perfkit under a real Slurm (a private one-node one the tests start and stop): `srun -n 2 perfkit run --mode multi
--cluster-from slurm` writes both tasks' parts under the job step's run id and `perfkit analyze` merges them
against a single-mode baseline; examples/slurm/compare.sbatch does the same as one job (`sbatch --wait`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from perfkit.cluster import free_ports

from tests.integration._util import meta
from tests.integration._util import perfkit as _perfkit

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TINY = ["--preset", "tiny", "--no-profile", "--quiet"]


DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "sinfo")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A private one-node Slurm from slurm.conf.in: its own munged (socket, key), slurmctld and slurmd on free
    ports, state and logs in a temporary folder; stopped when the module's tests end. The environment for
    its clients (SLURM_CONF) is what the fixture gives."""
    missing = [t for t in (*DAEMONS, *CLIENTS) if shutil.which(t) is None]
    if missing:  # a missing Slurm is a failure, never a skip: .ci/run installs it, as anyone can here
        pytest.fail(f"Slurm is not installed here ({', '.join(missing)} not on PATH): apt-get install slurmctld "
                    f"slurmd slurm-client munge (what .ci/run does)")
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    ctld, slurmd = free_ports(2)
    conf = d / "slurm.conf"
    conf.write_text((HERE / "slurm.conf.in").read_text().replace("@HOST@", socket.gethostname().split(".")[0])
                    .replace("@CPUS@", str(os.cpu_count() or 1)).replace("@DIR@", str(d))
                    .replace("@CTLD_PORT@", str(ctld)).replace("@SLURMD_PORT@", str(slurmd)))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    starts = [["munged", "--force", f"--socket={d / 'munge.socket'}", f"--key-file={key}",
               f"--pid-file={d / 'munged.pid'}", f"--log-file={d / 'munged.log'}", f"--seed-file={d / 'munged.seed'}"],
              ["slurmctld", "-f", str(conf)], ["slurmd", "-f", str(conf)]]
    try:
        for argv in starts:  # each daemonises and writes its pid file
            started = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
            if started.returncode != 0:
                pytest.fail(f"{argv[0]} did not start: {started.stderr.strip()[-500:]}\n{_logs(d)}")
        _wait_idle(env, d)
        yield env
    finally:
        _stop(d)


def _wait_idle(env: dict[str, str], d: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=30, env=env)
        if state.returncode == 0 and any(s in state.stdout for s in ("idle", "mixed", "allocated")):
            return
        time.sleep(1)
    pytest.fail(f"the Slurm node was not up within {timeout:g} s\n{_logs(d)}")


def _logs(d: Path) -> str:
    return "\n".join(f"--- {p.name}:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                     for p in sorted(d.glob("*.log")))


def _stop(d: Path) -> None:
    """Stop the daemons this fixture started (their pid files), SIGTERM then SIGKILL."""
    pids = []
    for name in ("slurmd", "slurmctld", "munged"):
        try:
            pids.append(int((d / f"{name}.pid").read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for pid in pids:
        while time.monotonic() < deadline and psutil.pid_exists(pid):
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _env(slurm: dict[str, str]) -> dict[str, str]:
    """Tasks run this interpreter's perfkit: its virtualenv first on PATH (srun passes the environment on)."""
    env = dict(slurm)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("TF_CONFIG", None)
    return env


def test_srun_two_tasks_write_one_run_that_analyze_merges(tmp_path: Path, slurm: dict[str, str]) -> None:
    base = _perfkit("run", "--mode", "single", *TINY, "--results-dir", str(tmp_path), timeout=300)
    assert base.returncode == 0, base.stderr[-2000:]
    proc = subprocess.run(["srun", "--ntasks=2", "--time=10", sys.executable, "-m", "perfkit", "run", "--mode",
                           "multi", "--cluster-from", "slurm", *TINY, "--results-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=_env(slurm))
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


def test_the_example_batch_script_runs_baseline_multi_and_analysis_as_one_job(tmp_path: Path,
                                                                            slurm: dict[str, str]) -> None:
    env = {**_env(slurm), "RESULTS": str(tmp_path / "results"), "PRESET": "tiny", "PERFKIT_ARGS": "--no-profile"}
    proc = subprocess.run(["sbatch", "--wait", "--ntasks=2", "--time=15", f"--chdir={tmp_path}",
                           str(ROOT / "examples" / "slurm" / "compare.sbatch")],
                          capture_output=True, text=True, timeout=900, env=env)
    logs = sorted(tmp_path.glob("perfkit-compare-*.out"))
    text = logs[0].read_text() if logs else ""
    assert proc.returncode == 0, f"{proc.stderr[-1000:]}\n{text[-3000:]}"
    assert "Verdict" in text and "speedup" in text, text[-3000:]
    runs = {meta(p)["mode"] for p in (tmp_path / "results").iterdir() if (p / "run.json").is_file()}
    assert runs == {"single", "multi"}


def test_srun_launches_a_users_script_once_per_task_with_its_own_tf_config(tmp_path: Path,
                                                                           slurm: dict[str, str]) -> None:
    script = ROOT / "examples" / "own_script" / "train.py"
    proc = subprocess.run(["srun", "--ntasks=2", "--time=10", sys.executable, "-m", "perfkit", "launch",
                           "--cluster-from", "slurm", "--no-profile", "--quiet", "--results-dir", str(tmp_path), "--",
                           sys.executable, str(script), "--epochs", "2", "--samples", "6000", "--global-batch", "128"],
                          capture_output=True, text=True, timeout=600, env=_env(slurm))
    assert proc.returncode == 0, proc.stderr[-3000:]
    parts = sorted(p for p in tmp_path.iterdir() if "--w" in p.name)
    assert len(parts) == 2 and all(meta(p)["launch"]["recorded"] for p in parts)
    analysed = _perfkit("analyze", str(tmp_path), "--format", "json", "--no-html")
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    run = json.loads(analysed.stdout)["runs"][0]
    assert run["workers"] == 2 and run["steady_epoch_s"] > 0 and run["run_id"] == meta(parts[0])["run_id"]
