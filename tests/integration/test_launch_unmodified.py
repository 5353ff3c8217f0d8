"""`perfkit launch` of the two unmodified examples (no perfkit import): a Keras ``fit`` and a custom training
loop, each bare, as the single-mode baseline and on 2 workers, then analysed. The runs are made once per
example (module fixture) and read by every test."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from tests.integration._util import last_attempt, launch_retrying, meta, perfkit

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ARGS = ("--epochs", "3", "--steps-per-epoch", "12", "--per-worker-batch", "32")
STEPS = 3 * 12  # what the scripts train, by their own count


@dataclass(frozen=True)
class Runs:
    bare: subprocess.CompletedProcess[str]
    single: Path
    multi: Path
    analysis: dict


def _script_lines(text: str) -> list[str]:
    """The script's own lines (its epochs and step count), numbers blanked: the same with and without perfkit."""
    lines = [ln for ln in text.splitlines() if re.match(r"^(epoch \d+/\d+:|trained \d+ steps)", ln)]
    return [re.sub(r"\d+\.\d+", "#", ln) for ln in lines]


@pytest.fixture(scope="module", params=["keras_fit", "custom_loop"])
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    script = EXAMPLES / request.param / "train.py"
    results = tmp_path_factory.mktemp(request.param)
    bare = subprocess.run([sys.executable, str(script), *ARGS], capture_output=True, text=True, timeout=300)
    assert bare.returncode == 0, bare.stderr[-3000:]
    single = launch_retrying(results, ("--mode", "single"), [sys.executable, str(script), *ARGS])
    multi = launch_retrying(results, ("--workers", "2", "--sample-interval", "0.25"),
                            [sys.executable, str(script), *ARGS])
    proc = perfkit("analyze", "--results-dir", str(results), "--format", "json", "--no-html")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Runs(bare, single, multi, json.loads(proc.stdout))


def test_every_step_the_script_ran_is_recorded_on_every_worker(runs: Runs) -> None:
    assert f"trained {STEPS} steps" in runs.bare.stdout
    for run, workers in ((runs.single, 1), (runs.multi, 2)):
        m = meta(run)
        assert m["status"] == "complete" and m["launch"]["recorded"] is True, m.get("error")
        assert m["config"]["epochs"] == 3 and m["config"]["batch_size"] == 32 * workers
        for w in range(workers):
            steps = last_attempt(pd.read_parquet(run / "workers" / str(w) / "steps.parquet"))
            epochs = last_attempt(pd.read_parquet(run / "workers" / str(w) / "epochs.parquet"))
            assert len(steps) == STEPS and (steps["samples"] == 32).all() and len(epochs) == 3
            log = (run / "workers" / str(w) / "worker.log").read_text()
            assert f"trained {STEPS} steps" in log


def test_the_script_prints_and_exits_as_it_does_without_perfkit(runs: Runs) -> None:
    expected = _script_lines(runs.bare.stdout)
    assert len(expected) == 4, runs.bare.stdout
    for run, workers in ((runs.single, 1), (runs.multi, 2)):
        assert {w["exit_code"] for w in meta(run)["workers"]} == {0}
        restarted = bool(meta(run).get("restarts"))
        for w in range(workers):
            lines = _script_lines((run / "workers" / str(w) / "worker.log").read_text())
            # a restarted run's log holds the attempt cut short first: the last attempt is its last lines
            assert (lines[-len(expected):] if restarted else lines) == expected, lines


def test_both_workers_are_traced_and_the_run_is_analysed_against_its_baseline(runs: Runs) -> None:
    m = meta(runs.multi)
    assert {w["profile"]["status"] for w in m["workers"]} == {"captured"}
    doc = runs.analysis
    assert doc["baseline"]["run_id"] == runs.single.name
    row = next(r for r in doc["runs"] if r["run_id"] == runs.multi.name)
    assert row["speedup"] > 0 and row["split_source"] == "trace"
    workers = [w for w in doc["workers"] if w["run_id"] == runs.multi.name]
    assert len(workers) == 2 and all(w["compute_s"] > 0 for w in workers)


def test_what_the_steps_are_is_named(runs: Runs) -> None:
    steps = meta(runs.multi)["launch"]["steps"]
    if runs.single.parent.name.startswith("keras_fit"):
        assert steps == "Keras fit's batches"
    else:
        assert steps == "calls of tf.function train_step (it runs Strategy.run)"
        plan = meta(runs.multi)["workers"][0]["plan"]
        assert plan["step_function"]["top_level_calls"]["train_step"] == STEPS


RECORD_NO_ARGS = '''
import numpy as np, tensorflow as tf, perfkit
x = np.random.default_rng(0).normal(size=(480, 8)).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype("float32"))).batch(48).repeat()
model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(1)])
model.compile("sgd", "mse")
with perfkit.record() as rec:
    model.fit(ds, epochs=2, steps_per_epoch=10, verbose=0, callbacks=rec.callbacks)
print("trained", int(model.optimizer.iterations.numpy()), "steps")
'''


def test_perfkit_record_without_arguments_under_the_hook_is_recorded_once(tmp_path: Path) -> None:
    script = tmp_path / "fit_with_record.py"
    script.write_text(RECORD_NO_ARGS)
    run = launch_retrying(tmp_path / "results", ("--mode", "single"), [sys.executable, str(script)])
    m = meta(run)
    assert m["config"]["batch_size"] == 48, "the global batch is read from the dataset fit was given"
    steps = pd.read_parquet(run / "workers" / "0" / "steps.parquet")
    assert len(steps) == 20 and (steps["samples"] == 48).all(), "one record of 20 steps, not two"
    assert "trained 20 steps" in (run / "workers" / "0" / "worker.log").read_text()


def test_a_launched_script_killed_inside_the_profiler_is_started_again_and_traced(tmp_path: Path) -> None:
    """TF 2.21's profiler crash (docs/tf-profiler-crash.md), injected once where it strikes: the unmodified
    script is started again, the window traced again, and the run holds the last attempt's every step."""
    import os

    from perfkit.profiler.tracewindow import CRASH_IN_STOP_ENV

    env = {**os.environ, CRASH_IN_STOP_ENV: str(tmp_path / "crashed-once")}
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "perfkit", "launch", "--mode", "single", "--results-dir",
                           str(results), "--quiet", "--", sys.executable, str(EXAMPLES / "custom_loop" / "train.py"),
                           *ARGS], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "crashed-once").exists(), "the injected crash never ran"
    run = Path(proc.stdout.strip().splitlines()[-1])
    m = meta(run)
    assert m["status"] == "complete" and [r["profiler_crash"] for r in m["restarts"]] == [True], m["restarts"]
    assert m["profile"]["workers"]["0"]["status"] == "captured"
    steps = pd.read_parquet(run / "workers" / "0" / "steps.parquet")
    assert len(steps[steps["attempt"] == 1]) == STEPS


NO_STRATEGY_EXIT_3 = '''
import sys, tensorflow as tf
w = tf.Variable(tf.zeros([8, 1]))
ds = tf.data.Dataset.from_tensor_slices((tf.ones([64, 8]), tf.ones([64, 1]))).batch(16).repeat()

@tf.function
def setup():
    w.assign(tf.zeros([8, 1]))

@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
    w.assign_sub(0.1 * tape.gradient(loss, w))
    return loss

setup()
for epoch in range(2):
    for x, y in ds.take(7):
        step(x, y)
    print("epoch", epoch + 1, "done")
sys.exit(3)
'''


def test_a_loop_without_a_strategy_is_recorded_and_its_exit_status_kept(tmp_path: Path) -> None:
    """No strategy: the step is the first tf.function called repeatedly (not the set-up one); a new pass
    over the dataset ends an epoch; the script's exit status 3 is the run's failure, its steps kept."""
    script = tmp_path / "loop.py"
    script.write_text(NO_STRATEGY_EXIT_3)
    bare = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert bare.returncode == 3, bare.stderr[-2000:]
    proc = perfkit("launch", "--mode", "single", "--no-profile", "--results-dir", str(tmp_path / "r"), "--",
                   sys.executable, str(script), timeout=300)
    assert proc.returncode == 1 and "exited with code 3" in proc.stderr, proc.stderr[-2000:]
    run = next((tmp_path / "r").iterdir())
    m = meta(run)
    assert m["status"] == "failed" and m["workers"][0]["exit_code"] == 3
    assert m["workers"][0]["plan"]["step_function"]["name"] == "step"
    assert m["workers"][0]["plan"]["step_function"]["rule"] == "repeated"
    steps = pd.read_parquet(run / "workers" / "0" / "steps.parquet")
    assert len(steps) == 14 and sorted(steps["epoch"].unique()) == [0, 1] and (steps["samples"] == 16).all()
    log = (run / "workers" / "0" / "worker.log").read_text()
    assert "epoch 1 done" in log and "epoch 2 done" in log
