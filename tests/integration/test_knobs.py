"""The trainer's knobs on a real 2-worker cluster (docs/tuning.md): recorded in run.json, one step record
per execution, the trace window in executions on both workers, and fewer collectives per batch."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.integration._util import TINY_MULTI, meta, perfkit, require_every_trace, run_ok, traces

pytestmark = pytest.mark.integration

K = 4
KNOBS = ("--steps-per-execution", str(K), "--metrics", "minimal", "--bytes-per-pack", "262144")


@pytest.mark.timeout(240)
def test_knobs_reach_tensorflow_and_the_records_count_executions(tmp_path: Path) -> None:
    run, _ = run_ok(tmp_path / "tuned", "run", "--mode", "multi", "--workers", "2", *TINY_MULTI, *KNOBS, "--quiet")
    m = meta(run)
    assert m["status"] == "complete"
    assert m["config"]["knobs"] == {"steps_per_execution": K, "metrics": "minimal", "bytes_per_pack": 262144,
                                    "all_reduce": "ring", "prefetch": "auto"}
    # tiny: 2048 players / global batch 256 = 8 batches an epoch = 2 executions of 4, 128 samples a batch a worker
    assert m["plan"]["steps_per_epoch"] == 8 and m["plan"]["executions_per_epoch"] == 2
    assert m["plan"]["steps_per_execution"] == K
    for i in range(2):
        steps = pd.read_parquet(run / f"workers/{i}/steps.parquet")
        assert steps[["epoch", "step", "samples"]].values.tolist() == [[0, 0, 512], [0, 4, 512], [1, 0, 512],
                                                                      [1, 4, 512]]
        assert steps.groupby("epoch")["samples"].sum().tolist() == [2048 // 2] * 2
        epochs = pd.read_parquet(run / f"workers/{i}/epochs.parquet")
        assert epochs["accuracy"].notna().all() and epochs["auc"].isna().all()  # minimal: no AUC computed

    # The auto window, in executions: the second of epoch 2 (the first runs cold after validation).
    assert m["profile"]["window"] == {"first": 4, "last": 4}
    tables = require_every_trace(run)
    for i in range(2):
        mine = tables.steps[tables.steps["worker"] == i]
        assert mine[["epoch", "step"]].values.tolist() == [[1, 4]]  # tf-keras' marker: the execution's first batch
        assert tables.checks[str(i)]["matched_steps"] == 1 and tables.checks[str(i)]["within_10pct"]
    proc = perfkit("analyze", str(run), "--results-dir", str(tmp_path / "tuned"), "--format", "json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout)["runs"][0]
    assert row["split_source"] == "trace", row["split_note"]
    tuned = pd.read_parquet(run / "trace_steps.parquet")  # written by analyze (its trace cache)

    base, _ = run_ok(tmp_path / "default", "run", "--mode", "multi", "--workers", "2", *TINY_MULTI, "--quiet")
    default = traces(base).steps
    assert default is not None
    per_batch_default = float(default["collectives"].median())
    per_batch_tuned = float(tuned["collectives"].median()) / K
    print(f"collectives per batch: default {per_batch_default:.1f}, tuned {per_batch_tuned:.1f}")
    # Measured 2026-12-03: 22 a batch (6 gradient packs + 16 metric-state reductions) against 40 per execution
    # of 4 batches (6 + 4 a batch: the loss's and accuracy's totals and counts only).
    assert per_batch_tuned < per_batch_default - 5
