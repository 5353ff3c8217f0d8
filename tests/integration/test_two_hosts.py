"""A real two-host run: two network namespaces joined by a veth pair, one worker started in each with
`--host`, the same `--run-id`; each host writes its own part of the run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests import clusters
from tests.integration._util import meta

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Addresses that exist only inside this test's own namespaces.
HOSTS = {"east": "10.251.7.1", "west": "10.251.7.2"}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


@pytest.fixture
def namespaces() -> Iterator[dict[str, str]]:
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("network namespaces need root and iproute2's `ip`")
    tag = f"pk{os.getpid() % 100000}"
    names = {host: f"{tag}{host}" for host in HOSTS}
    try:
        for ns in names.values():
            _ip("netns", "add", ns)
        _ip("link", "add", f"{tag}e", "type", "veth", "peer", "name", f"{tag}w")
        for host, dev in (("east", f"{tag}e"), ("west", f"{tag}w")):
            _ip("link", "set", dev, "netns", names[host])
            _ip("-n", names[host], "addr", "add", f"{HOSTS[host]}/24", "dev", dev)
            _ip("-n", names[host], "link", "set", dev, "up")
            _ip("-n", names[host], "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, OSError) as exc:
        for ns in names.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else str(exc)
        pytest.skip(f"cannot create network namespaces here: {detail}")
    try:
        yield names
    finally:
        for ns in names.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_one_worker_per_namespace_completes_the_run(tmp_path: Path, namespaces: dict[str, str]) -> None:
    cluster = clusters.write(tmp_path / "cluster.toml",
                             *(clusters.host(h, a, base_port=20000) for h, a in HOSTS.items()))
    procs = {}
    for host, ns in namespaces.items():
        procs[host] = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "perfkit", "run", "--mode", "multi", "--cluster",
             str(cluster), "--host", host, "--run-id", "twohost", "--preset", "tiny", "--connect-timeout", "120",
             # No trace window: TF's profiler can crash a worker when a capture stops, and a host that is
             # one part of a cluster cannot restart on its own (see docs/traces.md).
             "--results-dir", str(tmp_path / host), "--quiet", "--no-profile"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        outputs = {host: p.communicate(timeout=400) for host, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    for host, p in procs.items():
        assert p.returncode == 0, f"{host}: {outputs[host][1][-3000:]}"
    for index, host in enumerate(HOSTS):
        part = tmp_path / host / f"twohost--{host}"
        m = meta(part)
        assert m["status"] == "complete" and m["run_id"] == "twohost"
        assert m["part"] == {"name": host, "workers": [index]}
        assert m["workers"][0]["endpoint"] == f"{HOSTS[host]}:20000" and m["workers"][0]["anchor_wall_ns"]
        assert len(pd.read_parquet(part / f"workers/{index}/steps.parquet")) == 2 * (2048 // 256)
