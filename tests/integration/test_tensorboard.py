"""A real TensorBoard on loopback over a run holding recorded captures: the Profile tab's HTTP API lists
the run and one host per worker, and its overview page reports the steps."""

from __future__ import annotations

import gzip
import json
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration._util import start

pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parents[1] / "data"


def _make_run(results: Path, run_id: str) -> None:
    run = results / run_id
    session = run / "tensorboard/plugins/profile" / run_id
    session.mkdir(parents=True)
    for w in (0, 1):
        (session / f"vm-w{w}.xplane.pb").write_bytes(
            gzip.decompress((DATA / f"tiny-2w-w{w}.xplane.pb.gz").read_bytes()))
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "run_id": run_id, "status": "complete"}))


def _get(url: str) -> Any:
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        body = resp.read()
        if resp.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return json.loads(body)


def _serve(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = start("tensorboard", *args)
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"TensorBoard on (http://127\.0\.0\.1:\d+/)", line)
        if m:
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"no URL printed: {proc.communicate()[1][-2000:]}")


def _hosts(url: str, run: str, tool: str) -> list[str]:
    q = urllib.parse.urlencode({"run": run, "tag": tool})
    return [h["hostname"] if isinstance(h, dict) else h for h in _get(f"{url}data/plugin/profile/hosts?{q}")]


def _poll_runs(url: str, want: str) -> list[str]:
    deadline = time.monotonic() + 60
    runs: list[str] = []
    while time.monotonic() < deadline and want not in runs:
        runs = _get(url + "data/plugin/profile/runs")
        time.sleep(1)
    return runs


@pytest.mark.parametrize("select", [False, True])
def test_profile_tab_lists_every_worker_and_its_steps(tmp_path: Path, select: bool) -> None:
    results = tmp_path / "results"
    _make_run(results, "r1")
    _make_run(results, "other")
    proc, url = _serve(*(["r1"] if select else []), "--results-dir", str(results))
    try:
        run = "r1/tensorboard/r1"
        runs = _poll_runs(url, run)
        assert run in runs and (("other/tensorboard/other" in runs) != select), runs
        hosts = _hosts(url, run, "trace_viewer")
        assert {"vm-w0", "vm-w1"} <= set(hosts), hosts
        # With several hosts the overview page is offered for all of them together, as the UI shows it.
        overview_host = _hosts(url, run, "overview_page")[0]
        q = urllib.parse.urlencode({"run": run, "tag": "overview_page", "host": overview_host})
        overview = json.dumps(_get(f"{url}data/plugin/profile/data?{q}"))
        m = re.search(r'"steptime_ms_average": "([0-9.]+)"', overview)
        assert m and 100 < float(m.group(1)) < 300, overview[:500]  # the recorded steps took 171 and 194 ms
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert "stopped" in out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL])
def test_no_tensorboard_outlives_perfkit_whatever_signal_ends_it(tmp_path: Path, sig: signal.Signals) -> None:
    import psutil

    results = tmp_path / "results"
    _make_run(results, "r1")
    proc, url = _serve("--results-dir", str(results))
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children, "perfkit tensorboard started no TensorBoard process"
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, f"left running after {sig.name}: {[p.pid for p in alive]}"
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)
