"""A healthy run is never failed for how it ends (issue 46): the article's script shape on 4 workers
(``repeat()`` and ``steps_per_epoch``), launched unmodified, whose workers take longer from their last step
to their exit than the hang limit: TensorFlow's own teardown of fit's distributed iterator, then the
script's own work after fit. The run must end complete, every step recorded, each worker's exit timed."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from tests.integration._bench import ROOT
from tests.integration._util import last_attempt, meta, only_run, perfkit

pytestmark = pytest.mark.integration

EPOCHS, STEPS = 2, 8  # 4096 samples in global batches of 512
AFTER_FIT_S = 15.0  # the script's own work after fit: longer than the hang limit below
SCRIPT = ROOT / "benchmarks" / "article_multi_script.py"  # imports only TensorFlow and NumPy: run by its path
HANG_S = "10"  # a fixed limit: under the default (30 s floor) a short teardown would pass the old code too


def test_the_article_shape_on_4_workers_ends_complete_though_its_exit_outlasts_the_hang_limit(tmp_path) -> None:
    proc = perfkit("launch", "--workers", "4", "--no-profile", "--hang-timeout", HANG_S, "--sample-interval", "0.5",
                   "--results-dir", str(tmp_path), "--", sys.executable, str(SCRIPT),
                   "--samples", "4096", "--epochs", str(EPOCHS), "--global-batch", "512", "--units", "16", "8",
                   "--after-fit", str(AFTER_FIT_S), timeout=400)
    run = only_run(tmp_path)
    m = meta(run)
    assert proc.returncode == 0 and m["status"] == "complete", (m.get("error"), proc.stderr[-2000:])
    for w in m["workers"]:
        steps = last_attempt(pd.read_parquet(run / "workers" / str(w["index"]) / "steps.parquet"))
        assert len(steps) == EPOCHS * STEPS, f"worker {w['index']} recorded {len(steps)} steps"
        assert w["exit_code"] == 0 and w["state"] == "done"
        teardown = w["teardown"]
        assert teardown["stopped"] is False and teardown["s"] >= AFTER_FIT_S, teardown
    said = " ".join((proc.stderr + proc.stdout).split())  # the terminal wraps long lines
    assert "4 workers took" in said and "last step to exit" in said, "the slow exits are said in one warning"
