"""perfkit under a real Slurm (a private one-node one the tests start and stop): examples/slurm/compare.sbatch
as one batch job of two tasks, whose `srun -n 2 perfkit run --mode multi --cluster-from slurm` step writes
both tasks' parts under the job step's run id and `perfkit analyze` merges them against the job's
single-mode baseline (two tests read that one job); and examples/slurm/launch.sbatch, a user's own script
measured against its baseline as one job."""

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
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from perfkit.cluster import free_ports
from tests.integration._util import meta
from tests.integration._util import perfkit as _perfkit

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "sinfo", "scontrol")


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


@dataclass(frozen=True)
class Job:
    folder: Path
    state: str  # Slurm's JobState once it ended: COMPLETED, FAILED, ...
    exit_code: str  # Slurm's ExitCode, "status:signal"

    def log(self) -> str:
        logs = sorted(self.folder.glob("perfkit-*.out"))
        return logs[0].read_text() if logs else ""


def submit(slurm: dict[str, str], d: Path, script: str, *args: str, env: dict[str, str] | None = None) -> Job:
    """``sbatch`` of an example batch script as one job of two tasks, waited for. The job's end is polled
    every half second (``sbatch --wait`` polls at 2, 8, then every 10 s)."""
    env = {**_env(slurm), "RESULTS": str(d / "results"), **(env or {})}
    submitted = subprocess.run(["sbatch", "--parsable", "--ntasks=2", "--time=15", f"--chdir={d}",
                                str(ROOT / "examples" / "slurm" / script), *args],
                               capture_output=True, text=True, timeout=60, env=env)
    assert submitted.returncode == 0, submitted.stderr[-2000:]
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=30,
                               env=env)
        fields = dict(f.split("=", 1) for f in shown.stdout.split() if "=" in f)
        if fields.get("JobState") in ENDED:
            return Job(d, fields["JobState"], fields.get("ExitCode", "?"))
        time.sleep(0.5)
    pytest.fail(f"Slurm job {job} did not end within 900 s\n{_logs(Path(slurm['SLURM_CONF']).parent)}")


@pytest.fixture(scope="module")
def batch_job(slurm: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Job:
    """The example batch script as one job of two tasks (its baseline on one task, then ``srun`` of both
    tasks as one multi-worker run, then the analysis), run once for the tests that read it."""
    return submit(slurm, tmp_path_factory.mktemp("batch"), "compare.sbatch",
                  env={"PRESET": "tiny", "PERFKIT_ARGS": "--no-profile"})


ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}


@pytest.mark.timeout(960)
def test_srun_two_tasks_write_one_run_that_analyze_merges(batch_job: Job) -> None:
    assert (batch_job.state, batch_job.exit_code) == ("COMPLETED", "0:0"), batch_job.log()[-3000:]
    results = batch_job.folder / "results"
    parts = sorted(p for p in results.iterdir() if "--w" in p.name)
    assert [p.name.rsplit("--", 1)[1] for p in parts] == ["w0", "w1"], list(results.iterdir())
    rid = meta(parts[0])["run_id"]
    assert rid.startswith("slurm-") and meta(parts[1])["run_id"] == rid, "one run id for the job step"
    for i, part in enumerate(parts):
        m = meta(part)
        assert m["status"] == "complete" and m["scheduler"] == "slurm" and m["part"]["workers"] == [i]
        assert (part / "workers" / str(i) / "steps.parquet").is_file()
    analysed = _perfkit("analyze", str(results), "--format", "json", "--no-html")
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    doc = json.loads(analysed.stdout)
    multi = next(r for r in doc["runs"] if r["run_id"] == rid)
    assert multi["workers"] == 2 and multi["speedup"] > 0 and doc["baseline"]["run_id"].endswith("-single")


@pytest.mark.timeout(960)
def test_the_example_batch_script_runs_baseline_multi_and_analysis_as_one_job(batch_job: Job) -> None:
    tmp_path, text = batch_job.folder, batch_job.log()
    assert (batch_job.state, batch_job.exit_code) == ("COMPLETED", "0:0"), text[-3000:]
    assert "Verdict" in text and "speedup" in text, text[-3000:]
    runs = {meta(p)["mode"] for p in (tmp_path / "results").iterdir() if (p / "run.json").is_file()}
    assert runs == {"single", "multi"}


@pytest.mark.timeout(960)
def test_the_launch_batch_script_measures_an_unmodified_script_against_its_baseline(
        tmp_path: Path, slurm: dict[str, str]) -> None:
    """examples/slurm/launch.sbatch with the custom-loop example (no perfkit import): the baseline on one
    task, each task's part recorded through the start-up hook, the parts analysed as one run against it."""
    script = ROOT / "examples" / "custom_loop" / "train.py"
    job = submit(slurm, tmp_path, "launch.sbatch", sys.executable, str(script), "--epochs", "2", "--steps-per-epoch",
                 "10", env={"PERFKIT_ARGS": "--no-profile"})
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.log()[-3000:]
    results = tmp_path / "results"
    parts = sorted(p for p in results.iterdir() if "--w" in p.name)
    assert len(parts) == 2 and all(meta(p)["launch"]["recorded"] for p in parts)
    assert meta(parts[0])["launch"]["steps"] == "calls of tf.function train_step (it runs Strategy.run)"
    assert "Verdict" in job.log() and "speedup" in job.log(), job.log()[-3000:]
    analysed = _perfkit("analyze", str(results), "--format", "json", "--no-html")
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    doc = json.loads(analysed.stdout)
    run = next(r for r in doc["runs"] if r["run_id"] == meta(parts[0])["run_id"])
    assert run["workers"] == 2 and run["steady_epoch_s"] > 0 and run["speedup"] > 0
    assert doc["baseline"]["run_id"].endswith("-single")
