"""`perfkit launch --hosts` across two hosts reached over real OpenSSH (two network namespaces, each with its
own sshd: ``_sshhosts.py``). Each host writes into a results directory of its own, so its part really comes
back over SSH; the launching process runs on host east, as it would on a user's first node."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from benchmarks import _sshhosts
from tests.integration._util import meta

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
KERAS = [sys.executable, str(ROOT / "examples" / "keras_fit" / "train.py")]
LOOP = [sys.executable, str(ROOT / "examples" / "custom_loop" / "train.py")]
LONG = ["--epochs", "60", "--steps-per-epoch", "20"]  # runs until a fault is made in it
FLAGS = ("--no-profile", "--connect-timeout", "90")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_sshhosts.Hosts]:
    if os.geteuid() != 0:
        pytest.skip("two hosts in network namespaces need root")
    why = _sshhosts.missing()
    if why is not None:  # a failure, never a skip: .ci/run installs OpenSSH, as anyone can here
        pytest.fail(f"two SSH hosts cannot be made here: {why}")
    with _sshhosts.two_hosts(tmp_path_factory.mktemp("sshhosts")) as made:
        yield made


def launch(hosts: _sshhosts.Hosts, results: Path, *args: str, wait: bool = True
           ) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    """``perfkit launch ARGS`` started on host east, each host's records in ``results/<host>``."""
    argv = hosts.on("east", [sys.executable, "-m", "perfkit", "launch", "--results-dir", str(results / "here"),
                             "--remote-results-dir", str(results / "{host}"), *args])
    if not wait:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=hosts.env)
    return subprocess.run(argv, capture_output=True, text=True, env=hosts.env, timeout=400)


def test_a_script_on_two_hosts_and_its_baseline_come_back_as_one_run(hosts: _sshhosts.Hosts, tmp_path: Path) -> None:
    base = launch(hosts, tmp_path, "--mode", "single", "--hosts", "west", "--run-id", "base", *FLAGS, "--", *KERAS,
                  "--epochs", "2", "--steps-per-epoch", "10")
    assert base.returncode == 0, base.stderr[-3000:]
    multi = launch(hosts, tmp_path, "--hosts", "east,west", "--run-id", "two", *FLAGS, "--live", "--", *KERAS,
                   "--epochs", "2", "--steps-per-epoch", "10")
    assert multi.returncode == 0, multi.stderr[-3000:]
    shown = " ".join(multi.stdout.split())  # (the terminal wraps long lines)
    assert "[w1@west] epoch 2/2" in shown, "each worker's output, prefixed by index and host"
    # --live: perfkit watch's view of the launching host's live copy, both hosts' workers in it
    view = multi.stdout.split("two running", 1)
    assert len(view) == 2 and "east" in view[1] and "west" in view[1], multi.stdout[-3000:]
    here = tmp_path / "here"
    assert sorted(p.name for p in here.iterdir() if not p.name.startswith(".")) == ["base", "two--east", "two--west"]
    for i, host in enumerate(("east", "west")):
        part = meta(here / f"two--{host}")
        assert part["status"] == "complete" and part["part"] == {"name": host, "workers": [i]}
        assert part["workers"][0]["endpoint"] == f"{_sshhosts.ADDRESSES[host]}:23456"
        assert part["cluster"]["hosts"][i]["cores"] == float(len(os.sched_getaffinity(0)))  # read over SSH
        assert (here / f"two--{host}" / "workers" / str(i) / "steps.parquet").is_file()
        assert (tmp_path / host / f"two--{host}" / "run.json").is_file(), "written there, brought back here"
    analysed = subprocess.run([sys.executable, "-m", "perfkit", "analyze", str(here), "--format", "json", "--no-html"],
                              capture_output=True, text=True, timeout=300)
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    doc = json.loads(analysed.stdout)
    run = next(r for r in doc["runs"] if r["run_id"] == "two")
    assert run["workers"] == 2 and run["speedup"] > 0 and doc["baseline"]["run_id"] == "base"
    trace = tmp_path / "two.perfetto.json.gz"
    exported = subprocess.run([sys.executable, "-m", "perfkit", "export", str(here / "two--east"), "-o", str(trace)],
                              capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0 and trace.stat().st_size > 0, exported.stderr[-2000:]
    assert not any(hosts.left().values()), hosts.left()


def test_a_parameter_server_script_on_two_hosts_puts_the_chief_and_ps_on_the_first(hosts: _sshhosts.Hosts,
                                                                                   tmp_path: Path) -> None:
    script = [sys.executable, str(ROOT / "examples" / "ps_training" / "train.py"), "--epochs", "2",
              "--steps-per-epoch", "10", "--units", "32"]
    proc = launch(hosts, tmp_path, "--mode", "ps", "--ps", "1", "--hosts", "east,west", "--run-id", "ps2", *FLAGS,
                  "--", *script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    here = tmp_path / "here"
    east, west = meta(here / "ps2--east"), meta(here / "ps2--west")
    assert [(w["role"], w["host"]) for w in east["workers"]] == [("worker", "east"), ("ps", "east"), ("chief", "east")]
    assert [(w["role"], w["host"]) for w in west["workers"]] == [("worker", "west")]
    assert east["status"] == west["status"] == "complete" and east["strategy"] == "ParameterServerStrategy"
    analysed = subprocess.run([sys.executable, "-m", "perfkit", "analyze", str(here), "--format", "json", "--no-html"],
                              capture_output=True, text=True, timeout=300)
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    doc = json.loads(analysed.stdout)
    run = next(r for r in doc["runs"] if r["run_id"] == "ps2")
    assert run["mode"] == "ps" and run["workers"] == 2 and run["samples"] == 20 * 256
    assert {w["host"] for w in doc["workers"] if w["run_id"] == "ps2"} == {"east", "west"}
    assert not any(hosts.left().values()), hosts.left()


def test_a_cluster_file_with_ssh_targets_runs_a_custom_loop_into_a_shared_folder(hosts: _sshhosts.Hosts,
                                                                               tmp_path: Path) -> None:
    """No --remote-results-dir: both hosts see the launching host's results folder (one file system), which
    perfkit detects and writes into as it is."""
    cluster = tmp_path / "cluster.toml"
    cluster.write_text("".join(f'[[hosts]]\nname = "{h}"\nssh = "{h}"\naddress = "{a}"\nworkers = 1\n\n'
                               for h, a in _sshhosts.ADDRESSES.items()))
    argv = hosts.on("east", [sys.executable, "-m", "perfkit", "launch", "--cluster", str(cluster), "--run-id", "loop",
                             "--results-dir", str(tmp_path / "shared"), *FLAGS, "--", *LOOP, "--epochs", "2",
                             "--steps-per-epoch", "10"])
    proc = subprocess.run(argv, capture_output=True, text=True, env=hosts.env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(shared with this host)" in " ".join(proc.stdout.split()), proc.stdout  # (the terminal wraps lines)
    parts = sorted((tmp_path / "shared").glob("loop--*"))
    assert [p.name for p in parts] == ["loop--east", "loop--west"]
    assert all(meta(p)["launch"]["steps"] == "calls of tf.function train_step (it runs Strategy.run)" for p in parts)
    base = subprocess.run(hosts.on("east", [sys.executable, "-m", "perfkit", "launch", "--mode", "single", "--hosts",
                                            "west", "--run-id", "loop-base", "--results-dir", str(tmp_path / "shared"),
                                            *FLAGS, "--", *LOOP, "--epochs", "2", "--steps-per-epoch", "10"]),
                          capture_output=True, text=True, env=hosts.env, timeout=400)
    assert base.returncode == 0, base.stderr[-3000:]
    analysed = subprocess.run([sys.executable, "-m", "perfkit", "analyze", str(tmp_path / "shared"), "--format", "json",
                               "--no-html"], capture_output=True, text=True, timeout=300)
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    doc = json.loads(analysed.stdout)
    run = next(r for r in doc["runs"] if r["run_id"] == "loop")
    assert run["workers"] == 2 and run["speedup"] > 0 and doc["baseline"]["run_id"] == "loop-base"


def test_arguments_and_named_variables_arrive_as_themselves(hosts: _sshhosts.Hosts, tmp_path: Path) -> None:
    out = tmp_path / "argv.json"
    os.environ["PERFKIT_TEST_NOT_NAMED"] = "stays here"
    try:
        proc = launch(hosts, tmp_path, "--mode", "single", "--hosts", "west", "--env", "PERFKIT_TEST_NAMED=yes",
                      "--no-auto-record", "--", sys.executable, "-c",
                      "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps([sys.argv[2:], "
                      "os.environ.get('PERFKIT_TEST_NAMED'), os.environ.get('PERFKIT_TEST_NOT_NAMED')]))",
                      str(out), "a b", "it's", "x;y", "$HOME", "`id`")
    finally:
        del os.environ["PERFKIT_TEST_NOT_NAMED"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(out.read_text()) == [["a b", "it's", "x;y", "$HOME", "`id`"], "yes", None]


def test_a_remote_worker_killed_is_named_and_nothing_is_left(hosts: _sshhosts.Hosts, tmp_path: Path) -> None:
    proc = launch(hosts, tmp_path, "--hosts", "east,west", "--run-id", "kill", *FLAGS, "--", *KERAS, *LONG, wait=False)
    code, last = _after(proc, lambda: os.kill(hosts.training("west", KERAS[1]), signal.SIGKILL))
    assert code == 1, last
    assert "failed on host west" in last and "worker 1" in last and "SIGKILL" in last, last
    assert meta(tmp_path / "here" / "kill--west")["status"] == "failed"
    assert hosts.emptied(10) is not None, hosts.left()


def test_the_launcher_killed_stops_every_host_within_10_s(hosts: _sshhosts.Hosts, tmp_path: Path) -> None:
    proc = launch(hosts, tmp_path, "--hosts", "east,west", "--run-id", "orphan", *FLAGS, "--", *KERAS, *LONG,
                  wait=False)
    hosts.training("west", KERAS[1])
    hosts.launcher(proc.pid).kill()
    proc.wait(timeout=30)
    assert hosts.emptied(10) is not None, f"left after 10 s: {hosts.left()}"
    for host in ("east", "west"):
        assert meta(tmp_path / host / f"orphan--{host}")["status"] == "interrupted"


def test_a_host_whose_link_drops_is_named_and_stops_its_workers(hosts: _sshhosts.Hosts, tmp_path: Path) -> None:
    proc = launch(hosts, tmp_path, "--hosts", "east,west", "--run-id", "cut", *FLAGS, "--", *KERAS, *LONG, wait=False)
    try:
        hosts.training("west", KERAS[1])
        hosts.link("west", up=False)
        gone = hosts.emptied(10, "west")
        _, err = proc.communicate(timeout=120)
    finally:
        hosts.link("west", up=True)
        proc.kill()
    assert gone is not None, f"west's workers outlived the lost link by 10 s: {hosts.left()}"
    assert proc.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert "failed on host west" in last and "SSH connection" in last and "records not brought back from west" in last
    assert meta(tmp_path / "here" / "cut--east")["status"] in ("failed", "interrupted")
    assert hosts.emptied(10) is not None, hosts.left()


@pytest.mark.parametrize("hosts_flag, extra, expected", [
    ("east,west-bare", (), "host west-bare (west-bare): 'perfkit' was not found there"),
    ("east,west-nokey", (), "host west-nokey (west-nokey): SSH refused the key"),
    ("east,10.251.9.77", (), "host 10.251.9.77 (10.251.9.77): unreachable over SSH"),
    ("east,east", (), "--hosts: host 'east' is named twice"),
    ("east,west:0", (), "the slot count '0' is not a positive integer"),
    ("east,west", ("--max-restarts", "1"), "--max-restarts: not with --hosts"),
])
def test_bad_hosts_are_one_line_and_leave_nothing(hosts: _sshhosts.Hosts, tmp_path: Path, hosts_flag: str,
                                                 extra: tuple[str, ...], expected: str) -> None:
    proc = launch(hosts, tmp_path, "--hosts", hosts_flag, *extra, "--", *KERAS)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert not any(hosts.left().values()), hosts.left()
    written = [p.name for p in (tmp_path / "here").iterdir()] if (tmp_path / "here").exists() else []
    assert written == [], written


def test_a_busy_port_on_a_host_is_named_before_anything_starts(hosts: _sshhosts.Hosts, tmp_path: Path) -> None:
    # SO_REUSEADDR: an earlier test's workers on west may have left connections to this port in TIME_WAIT,
    # which a plain bind refuses (the holder then died and the port was free after all).
    holder = subprocess.Popen(hosts.on("west", [sys.executable, "-c", "import socket, time; s = socket.socket(); "
                                                "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                                                "s.bind(('0.0.0.0', 23456)); s.listen(); time.sleep(60)"]))
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _listening(hosts, "west"):
            assert holder.poll() is None, "the port's holder on west could not bind it"
            time.sleep(0.2)
        assert _listening(hosts, "west"), "nothing listens on west's port 23456 after 20 s"
        proc = launch(hosts, tmp_path, "--hosts", "east,west", "--", *KERAS)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "host west (west): port 23456 is taken there" in proc.stderr and "--base-port" in proc.stderr
    assert not any(hosts.left().values()), hosts.left()


def _listening(hosts: _sshhosts.Hosts, host: str) -> bool:
    probe = subprocess.run(hosts.on(host, [sys.executable, "-c", "import socket; socket.create_connection("
                                           "('127.0.0.1', 23456), timeout=1)"]), capture_output=True)
    return probe.returncode == 0



def test_each_host_started_by_hand_writes_a_part_that_analyze_merges(hosts: _sshhosts.Hosts, tmp_path: Path) -> None:
    """Where no host may SSH to another: ``perfkit launch --cluster FILE --host NAME --run-id ID`` on each
    host, then each part copied beside the others (docs/cluster.md, by hand)."""
    cluster = tmp_path / "cluster.toml"
    cluster.write_text("".join(f'[[hosts]]\nname = "{h}"\naddress = "{a}"\ncores = 1\nworkers = 1\n\n'
                               for h, a in _sshhosts.ADDRESSES.items()))
    procs = {h: subprocess.Popen(hosts.on(h, [sys.executable, "-m", "perfkit", "launch", "--cluster", str(cluster),
                                              "--host", h, "--run-id", "hand", "--results-dir", str(tmp_path / h),
                                              "--quiet", *FLAGS, "--", *KERAS, "--epochs", "2", "--steps-per-epoch",
                                              "10"]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for h in _sshhosts.ADDRESSES}
    outs = {h: p.communicate(timeout=400) for h, p in procs.items()}
    assert all(p.returncode == 0 for p in procs.values()), {h: e[-2000:] for h, (_, e) in outs.items()}
    assert outs["west"][0].strip() == str(tmp_path / "west" / "hand--west")
    shutil.copytree(tmp_path / "west" / "hand--west", tmp_path / "east" / "hand--west")
    analysed = subprocess.run([sys.executable, "-m", "perfkit", "analyze", str(tmp_path / "east" / "hand--east"),
                               "--format", "json", "--no-html"], capture_output=True, text=True, timeout=300)
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    run = json.loads(analysed.stdout)["runs"][0]
    assert run["run_id"] == "hand" and run["workers"] == 2 and run["steady_epoch_s"] > 0


def test_a_stopped_remote_worker_is_named_by_its_own_host(hosts: _sshhosts.Hosts, tmp_path: Path) -> None:
    """A hang: east's worker only waits (for a worker it does not run), west's is stopped; the launching host
    leaves west the time to say so instead of stopping it first."""
    proc = launch(hosts, tmp_path, "--hosts", "east,west", "--run-id", "stall", "--hang-timeout", "8", *FLAGS, "--",
                  *KERAS, *LONG, wait=False)

    def stop() -> None:
        pid = hosts.training("west", KERAS[1])
        _stepping(tmp_path / "west" / "stall--west" / "workers" / "1")  # past its first steps: the hang limit holds
        os.kill(pid, signal.SIGSTOP)

    code, last = _after(proc, stop)
    assert code == 1, last
    assert "failed on host west" in last and "worker 1" in last and "is stopped" in last, last
    assert hosts.emptied(10) is not None, hosts.left()


def test_ctrl_c_stops_every_host_and_brings_their_records_back(hosts: _sshhosts.Hosts, tmp_path: Path) -> None:
    proc = launch(hosts, tmp_path, "--hosts", "east,west", "--run-id", "ctrlc", *FLAGS, "--", *KERAS, *LONG,
                  wait=False)
    try:
        hosts.training("west", KERAS[1])
        _watched_on_the_launching_host(tmp_path / "here", {0: "east", 1: "west"})
        hosts.launcher(proc.pid).send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted on every host" in err.strip().splitlines()[-1]
    for host in ("east", "west"):
        part = tmp_path / "here" / f"ctrlc--{host}"
        assert meta(part)["status"] == "interrupted" and meta(part)["transfer"]["bytes"] > 0
        assert (part / "workers").is_dir()
    assert not (tmp_path / "here" / ".live" / "ctrlc").exists(), "the live mirror goes when the parts come back"
    assert hosts.emptied(10) is not None, hosts.left()


def _watched_on_the_launching_host(results: Path, placed: dict[int, str], timeout: float = 60.0) -> None:
    """``perfkit watch`` on the launching host (its default: the run running under its results directory)
    shows every worker of every host training, each with its CPU as its own host read it."""
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        proc = subprocess.run([sys.executable, "-m", "perfkit", "watch", "--results-dir", str(results), "--once",
                               "--format", "json"], capture_output=True, text=True, timeout=60)
        last = proc.stdout + proc.stderr
        if proc.returncode == 0 and proc.stdout.strip():
            snap = json.loads(proc.stdout.strip().splitlines()[-1])
            rows = {w["index"]: w for w in snap["workers"]}
            if snap["run_id"] == "ctrlc" and {i: rows[i]["host"] for i in rows} == placed and all(
                    w["state"] == "training" and w["cpu_percent"] is not None for w in rows.values()):
                return
        time.sleep(1.0)
    raise AssertionError(f"perfkit watch did not show every host's worker training within {timeout:g} s: {last}")


def _stepping(worker_dir: Path, events: int = 20, timeout: float = 120.0) -> None:
    """Until the worker's heartbeat counts ``events`` progress events (steps, epochs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if int(json.loads((worker_dir / "heartbeat.json").read_text()).get("progress") or 0) >= events:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"{worker_dir}: fewer than {events} progress events within {timeout:g} s")


def _after(proc: subprocess.Popen[str], fault: Callable[[], None]) -> tuple[int, str]:
    """``fault`` made while ``proc`` (a launch) runs; its exit status and the last line it printed on stderr."""
    try:
        fault()
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    lines = err.strip().splitlines()
    return int(proc.returncode), lines[-1] if lines else err[-3000:]
