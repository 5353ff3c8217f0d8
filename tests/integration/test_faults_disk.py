"""A results disk that fills up in the middle of a real 2-worker run: a tiny tmpfs as ``--results-dir`` (root
only: it is mounted here, and unmounted whatever happens). A read-only remount mid-run is not tried: the
kernel refuses it while the workers hold their logs open for writing ("mount point is busy").

What must hold: perfkit exits non-zero with one error line naming the run's path and the disk's reason;
run.json is readable and says ``failed`` with that reason (or the line says run.json could not be written);
no temp file is left; every table already written reads back; ``perfkit analyze`` works or says why in one
line."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from perfkit.studies.faults import fill
from tests.integration._util import TINY_MULTI, perfkit, start, wait_for_status

pytestmark = pytest.mark.integration

SIZE = "8m"  # room for the run's start (run.json, logs, the first epochs' tables); the test fills the rest


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(disk)], capture_output=True,
                          text=True)
    if done.returncode:  # CI runs as root, as this machine does: a mount that fails is a failure, never a skip
        pytest.fail(f"cannot mount a tmpfs here (root needed): {done.stderr.strip()}")
    try:
        # The dataset cache lives in <results-dir>/datasets: kept off the small disk, which holds the run only.
        (tmp_path / "datasets").mkdir()
        (disk / "datasets").symlink_to(tmp_path / "datasets")
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_results_disk_that_fills_mid_run_fails_the_run_in_one_line_and_keeps_its_records(small_disk: Path) -> None:
    proc = start("run", "--mode", "multi", "--workers", "2", *TINY_MULTI, "--no-profile", "--epochs", "100",
                 "--results-dir", str(small_disk), "--quiet")
    try:
        wait_for_status(small_disk, 1, "epochs_done", 1, proc)
        fill(small_disk)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    run = next(p for p in small_disk.iterdir() if (p / "run.json").is_file())
    reason = "no space left on device"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("perfkit: error: "), err[-3000:]
    assert str(run) in lines[0] and reason in lines[0], lines[0]
    m = json.loads((run / "run.json").read_text())
    if m["status"] == "running":  # the disk left no room for it: the error line must say so
        assert "run.json could not be written" in lines[0] or "run.json: " in lines[0], lines[0]
    else:
        assert m["status"] == "failed" and reason in m["error"], m["error"]
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")], "a half-written file was left"
    tables = list(run.rglob("*.parquet"))
    assert any(p.name == "steps.parquet" for p in tables), "the epochs saved before the fault are kept"
    for table in tables:
        assert len(pd.read_parquet(table)) >= 0  # raises on a damaged file
    analysed = perfkit("analyze", str(run), "--format", "json", "--no-html", timeout=120)
    analysed_err = [ln for ln in analysed.stderr.splitlines() if ln.strip()]
    assert analysed.returncode == 0 or (len(analysed_err) == 1 and analysed_err[0].startswith("perfkit: error:")), \
        analysed.stderr[-3000:]
