"""The fault suite on real processes, through ``perfkit check faults`` as a user runs it: a worker stopped by SIGSTOP
(``perfkit run``), a worker of an unmodified script deadlocked in its own Keras callback (``perfkit launch``),
and the link of an emulated host cut (``ip link set eth0 down`` in its namespace). Each must be named right
-- the stopped or stuck worker first, as the cause, its peer as waiting; the two hosts as having lost each
other -- with the failed run's records readable. (A full results disk and
a killed launcher: test_faults_disk.py and test_isolation.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration._util import perfkit

pytestmark = pytest.mark.integration


@pytest.mark.timeout(600)
def test_every_injected_fault_is_named_right_and_the_failed_run_is_kept(tmp_path: Path) -> None:
    # tiny runs of 4 steps an epoch, the fault in the second; a 10 s hang limit (the auto limit's 30 s floor
    # is unit-tested: tests/unit/test_hang.py), so that the suite does not wait it out
    proc = perfkit("check", "faults", "--faults", "stop,lock,link", "--preset", "tiny", "--train-players", "1024",
                   "--test-players", "256", "--epochs", "30", "--at-step", "1", "--hang-timeout", "10",
                   "--results-dir", str(tmp_path), timeout=560)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert "named right in 3 of 3 trials" in proc.stdout
    [written] = (tmp_path / "check").glob("faults-*.json")
    data = json.loads(written.read_text())
    assert {f: s["named"] for f, s in data["summary"].items()} == {"stop": 1, "lock": 1, "link": 1}
    trials = {t["fault"]: t for t in data["trials"]}
    assert set(trials) == {"stop", "lock", "link"}
    for fault, t in trials.items():
        assert t["injected"] and t["named"] and t["exit_code"] == 1, t
        assert t["status"] == "failed" and t["steps_kept"] is not None and t["steps_kept"] > 0, t
    assert "worker 1 " in trials["stop"]["message"] and "is stopped" in trials["stop"]["message"]
    # its peer named as waiting: exited by TensorFlow's coordination service, or still waiting at the hang limit
    assert "waiting for it" in trials["stop"]["message"] or "waits for it" in trials["stop"]["message"]
    lock = trials["lock"]["message"]
    assert "worker 1 " in lock and "stuck in its own code" in lock and "stuck.py" in lock
    assert lock.index("worker 1 ") < lock.index("worker 0 ") and "waits for it inside TensorFlow" in lock
    assert "hosts fast and slow lost each other" in trials["link"]["message"]
