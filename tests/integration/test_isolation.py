"""Emulated hosts as hosts: private network namespaces, shaped links, and nothing left behind by any signal.

These need root (network namespaces, tc); without it they skip, saying so. CI runs as root."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from perfkit.cluster import load_cluster
from perfkit.errors import UsageError
from perfkit.results import RunRecord
from perfkit.trainer.hosts.netns import NETNS_DIR, Sandbox, netem_available, why_unavailable
from tests import clusters
from tests.integration._util import TINY_MULTI, meta, only_run, perfkit, start, wait_for_status, worker_processes

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(why_unavailable() is not None, reason=f"network namespaces: {why_unavailable()}")]

TINY = (*TINY_MULTI, "--no-profile")
CGROUP_BASES = (Path("/sys/fs/cgroup/cpu/perfkit"), Path("/sys/fs/cgroup/perfkit"))


def _outside_address() -> str:
    """An IPv4 address of this machine that is not loopback: how another machine would reach it."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    pytest.skip("this machine has no non-loopback IPv4 address to test from")


def _connects(address: str, port: int, netns: str | None = None) -> bool:
    code = f"import socket; socket.create_connection(({address!r}, {port}), timeout=3)"
    cmd = [sys.executable, "-c", code]
    if netns:
        cmd = ["nsenter", f"--net={NETNS_DIR / netns}", "--", *cmd]
    return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0


def _pair(tmp_path: Path, link: str = "") -> Path:
    return clusters.write(tmp_path / "pair.toml", clusters.pair(extra=link, base_port=20000))


def test_local_workers_cannot_be_reached_from_outside_their_namespace(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = start("run", "--mode", "multi", "--workers", "2", *TINY, "--epochs", "100", "--results-dir",
                 str(results), "--quiet")
    try:
        wait_for_status(results, 0, "state", "training", proc)
        m = meta(only_run(results))
        ns = m["network"]["namespaces"]["localhost"]
        port = int(m["cluster"]["workers"][0]["endpoint"].rsplit(":", 1)[1])
        assert _connects("127.0.0.1", port, ns), "inside the run's namespace the worker's server answers"
        assert not _connects(_outside_address(), port), "reachable from outside the run's namespace"
        assert not _connects("127.0.0.1", port), "reachable on this machine's own loopback"
        assert m["network"]["reachable_from_other_machines"] is False
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)


def _leftovers(run: Path, launcher: int) -> list[str]:
    out = [f"process {p.pid}: {' '.join(p.cmdline()[:4])}" for p in worker_processes(run)]
    out += [f"process {p.pid} (janitor)" for p in psutil.process_iter(["cmdline"])
            if (p.info.get("cmdline") or [])[-3:] == ["perfkit.trainer.hosts.janitor", "--for", str(launcher)]]
    out += [f"netns {p.name}" for p in NETNS_DIR.glob(f"pk{launcher}x*")]
    out += [f"cgroup {g}" for b in CGROUP_BASES for g in b.glob(f"{launcher}-*")]
    out += [f"folder {p}" for p in [run / "backup", *(run / "tensorboard").glob(".capture-*")] if p.exists()]
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL],
                         ids=lambda s: s.name)
def test_an_emulated_run_killed_by_any_signal_leaves_nothing(tmp_path: Path, sig: signal.Signals) -> None:
    results = tmp_path / "results"
    proc = start("run", "--mode", "multi", "--cluster", str(_pair(tmp_path)), *TINY, "--epochs", "100",
                 "--max-restarts", "1", "--results-dir", str(results), "--quiet")
    try:
        wait_for_status(results, 1, "epochs_done", 1, proc)
        run = only_run(results)
        assert (run / "backup").is_dir() and list(NETNS_DIR.glob(f"pk{proc.pid}x*")), "nothing to clean up?"
        proc.send_signal(sig)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline, left = time.monotonic() + 20, ["(not checked)"]
    while left and time.monotonic() < deadline:
        left = _leftovers(run, proc.pid)
        time.sleep(0.2)
    assert not left, f"left after {sig.name}: {left}"
    m = meta(run)  # a SIGKILLed launcher's run is finished by its janitor (gone by now, see _leftovers)
    assert m["status"] == "interrupted", f"after {sig.name}: run.json says {m['status']}"
    if sig == signal.SIGKILL:
        assert m["error"] == f"perfkit's launcher (pid {proc.pid}) ended without finishing the run", m["error"]
        assert any("cpu.parquet" in x for x in m["lost"]), m.get("lost")
        # Each worker got SIGINT when the launcher died (its parent-death signal) and saved its steps, unless
        # its peer's exit failed it first (it saves then too) or it was stuck in a collective past the janitor's
        # grace (SIGKILLed: then `lost` names it).
        states = {w["index"]: w["state"] for w in m["workers"]}
        assert {"interrupted", "failed"} & set(states.values()), states  # at least one saved on its way out
        unsaved = [i for i, state in states.items() if state not in ("interrupted", "failed")]
        assert all(any(x.startswith(f"worker {i}: ") for x in m["lost"]) for i in unsaved), (states, m["lost"])
    else:
        assert proc.returncode == 130
    assert not RunRecord.load(run).steps.empty, "the steps of the epochs done are kept"
    analysed = perfkit("analyze", str(run), "--format", "json", "--no-html", timeout=120)
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    excluded = {r["run_id"]: r["reason"] for r in json.loads(analysed.stdout)["excluded"]}
    assert excluded[run.name].startswith(f"status interrupted: {m['error']}"), excluded  # read, and said why


def _throughput_mbit(server_ns: str, client_ns: str, address: str, megabytes: int) -> float:
    server = subprocess.Popen(["nsenter", f"--net={NETNS_DIR / server_ns}", "--", sys.executable, "-c",
                               "import socket\ns = socket.socket(); s.bind(('0.0.0.0', 5001)); s.listen(1)\n"
                               "c, _ = s.accept()\nwhile c.recv(1 << 20): pass\nc.close()"])
    time.sleep(0.5)
    code = ("import socket, time\nc = socket.create_connection((%r, 5001), timeout=30); b = b'x' * (1 << 20)\n"
            "t = time.perf_counter()\nfor _ in range(%d): c.sendall(b)\nc.shutdown(socket.SHUT_WR); c.recv(1)\n"
            "print(%d * 8 / (time.perf_counter() - t))" % (address, megabytes, megabytes))
    try:
        out = subprocess.run(["nsenter", f"--net={NETNS_DIR / client_ns}", "--", sys.executable, "-c", code],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    finally:
        server.wait(timeout=30)
    return float(out)


@pytest.mark.solo  # the link's measured rate
def test_a_shaped_link_carries_its_bandwidth_and_is_torn_down(tmp_path: Path) -> None:
    made: list[str] = []
    box = Sandbox.create(load_cluster(_pair(tmp_path, "link = { bandwidth_mbit = 40 }\n")), made.append)
    try:
        assert box.mechanism == "netns" and len(made) == 3 and box.addresses == {"h0": "10.213.0.2",
                                                                              "h1": "10.213.0.3"}
        assert "tbf" in box.links["h0"]["egress"] and "rate 40Mbit" in box.links["h1"]["ingress"]
        rate = _throughput_mbit(box.namespaces["h1"], box.namespaces["h0"], "10.213.0.3", 10)
        assert 30 <= rate <= 44, f"a 40 Mbit/s link carried {rate:.1f} Mbit/s"
    finally:
        assert box.close() == []
    assert not [n for n in made if (NETNS_DIR / n).exists()], "namespaces left"


def test_latency_is_refused_naming_netem_where_the_kernel_lacks_it(tmp_path: Path) -> None:
    if netem_available():
        pytest.skip("this kernel has netem: latency is applied (test_latency_is_applied_with_netem)")
    made: list[str] = []
    with pytest.raises(UsageError, match=r"hosts\[0\]\.link\.latency_ms: needs tc's netem qdisc"):
        Sandbox.create(load_cluster(_pair(tmp_path, "link = { latency_ms = 5 }\n")), made.append)
    assert made and not [n for n in made if (NETNS_DIR / n).exists()], "a refused network leaves nothing"


def test_latency_is_applied_with_netem(tmp_path: Path) -> None:
    if not netem_available():
        pytest.skip("this kernel has no netem qdisc (tc: 'Specified qdisc kind is unknown'): delay and loss "
                    "cannot be emulated here")
    box = Sandbox.create(load_cluster(_pair(tmp_path, "link = { latency_ms = 20 }\n")), lambda n: None)
    try:
        assert "netem" in box.links["h0"]["egress"] and "delay 20" in box.links["h0"]["egress"]
        # A TCP connect to a closed port takes one round trip (SYN out, RST back): 20 ms each way.
        rtt = _connect_rtt(box.namespaces["h0"], "10.213.0.3")
        assert rtt >= 0.035, f"a 20 ms link each way gave a {rtt * 1e3:.1f} ms round trip"
    finally:
        box.close()


def _connect_rtt(ns: str, address: str) -> float:
    code = ("import socket, time\nt = time.perf_counter()\ntry:\n    socket.create_connection((%r, 9), timeout=5)\n"
            "except OSError:\n    pass\nprint(time.perf_counter() - t)" % address)
    out = subprocess.run(["nsenter", f"--net={NETNS_DIR / ns}", "--", sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return float(out)


def test_the_run_records_each_links_qdisc_as_applied(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = start("run", "--mode", "multi", "--cluster", str(_pair(tmp_path, "link = { bandwidth_mbit = 200 }\n")),
                 *TINY, "--epochs", "1", "--results-dir", str(results), "--quiet")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    net = meta(only_run(results))["network"]
    assert net["links"]["h1"]["requested"]["bandwidth_mbit"] == 200
    assert "rate 200Mbit" in net["links"]["h1"]["egress"] and "rate 200Mbit" in net["links"]["h1"]["ingress"]
    assert net["addresses"]["h1"] == "10.213.0.3"
