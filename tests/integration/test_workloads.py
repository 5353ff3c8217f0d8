"""Workloads other than the bot detector, through the CLI: the two examples at a tiny size (single, and
the communication-heavy one on 2 workers against its single run, made once for both tests), and a user's
faulty workload refused before anything is written."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from tests.integration._util import meta, run_ok
from tests.integration._util import perfkit as _perfkit

pytestmark = pytest.mark.integration
TF_NOISE = re.compile(r"^(WARNING: All log messages before absl|[IWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\])")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"


@pytest.fixture(scope="module")
def single_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """An example's tiny single-mode run, made once: the wide MLP's is read by its own test and is the
    baseline of its 2-worker run (test_the_communication_heavy_example_...), whose results folder it is."""
    made: dict[str, Path] = {}

    def get(file: str) -> Path:
        if file not in made:
            made[file], _ = run_ok(tmp_path_factory.mktemp(Path(file).stem), "run", "--mode", "single", "--preset",
                                   "tiny", "--workload", f"{EXAMPLES / file}:workload", "--no-profile", "--quiet")
        return made[file]

    return get


@pytest.mark.parametrize(("file", "name", "batch"),
                         [("small_cnn.py", "small-cnn", 256), ("wide_mlp.py", "wide-mlp", 64)])
def test_an_example_workload_runs_in_single_mode_and_records_its_own_metrics(
        single_run: Callable[[str], Path], file: str, name: str, batch: int) -> None:
    spec = f"{EXAMPLES / file}:workload"
    run = single_run(file)
    m = meta(run)
    assert m["status"] == "complete" and m["workload"]["name"] == name and m["workload"]["spec"] == spec
    assert m["config"]["batch_size"] == batch, "the workload's own global batch, no --batch-size given"
    epochs = pd.read_parquet(run / "workers" / "0" / "epochs.parquet")
    assert len(epochs) == 2 and epochs["val_accuracy"].notna().all() and epochs["loss"].notna().all()
    steps = pd.read_parquet(run / "workers" / "0" / "steps.parquet")
    tiny_train = {"small-cnn": 1024, "wide-mlp": 1024}[name]
    assert len(steps) == 2 * (tiny_train // batch)


def test_the_communication_heavy_example_on_two_workers_against_its_own_baseline(
        single_run: Callable[[str], Path]) -> None:
    spec = f"{EXAMPLES / 'wide_mlp.py'}:workload"
    results = single_run("wide_mlp.py").parent  # its baseline: the single run the test above reads
    proc = _perfkit("run", "--mode", "multi", "--workers", "2", "--preset", "tiny", "--workload", spec,
                    "--results-dir", str(results), "--quiet", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # A bot-detector baseline beside them must not be taken as theirs.
    proc = _perfkit("analyze", "--results-dir", str(results), "--format", "json", "--no-html")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    multi = next(r for r in doc["runs"] if r["mode"] == "multi")
    assert doc["baseline"]["run_id"].endswith("-single") and multi["speedup"] > 0
    assert multi["data"].startswith("workload wide-mlp 1") and multi["split_source"] in ("trace", "estimate")


BAD = '''
import tensorflow as tf

class Base:
    name, version, global_batch = "bad", "1", 32
    def __init__(self, preset, seed): pass
    def params(self): return {}
    def samples(self): return 256, 64
    def build_model(self):
        m = tf.keras.Sequential([tf.keras.layers.Input(shape=(4,)), tf.keras.layers.Dense(1)])
        m.compile(optimizer="sgd", loss="mse")
        return m
    def _ds(self, ctx, b, size):
        x = tf.zeros((256, 4)); y = tf.zeros((256, 1))
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(size, drop_remainder=True)
    def train_dataset(self, ctx, b): return self._ds(ctx, b, ctx.get_per_replica_batch_size(b))
    def eval_dataset(self, ctx, b): return self._ds(ctx, b, ctx.get_per_replica_batch_size(b))

class Raises(Base):
    def build_model(self): raise ValueError("layer sizes do not match")

class WrongBatch(Base):
    def train_dataset(self, ctx, b): return self._ds(ctx, b, 10)

class NotCompiled(Base):
    def build_model(self): return tf.keras.Sequential([tf.keras.layers.Input(shape=(4,)), tf.keras.layers.Dense(1)])

class NoEval:
    name, version = "noeval", "1"
    def params(self): return {}
    def samples(self): return 256, 64
    def build_model(self): pass
    def train_dataset(self, ctx, b): pass
no_eval = NoEval()
'''


@pytest.mark.parametrize(("attr", "mode", "message"), [
    ("Raises", "single", "build_model() failed: ValueError: layer sizes do not match"),
    ("WrongBatch", "multi", "train_dataset gives batches of 10, expected the per-replica batch 16"),
    ("NotCompiled", "single", "build_model() must return a compiled tf.keras model"),
    ("no_eval", "single", "NoEval object has no eval_dataset"),
    ("Missing", "single", "has no attribute 'Missing'"),
])
def test_a_faulty_workload_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, attr: str, mode: str,
                                                                  message: str) -> None:
    path = tmp_path / "bad_workload.py"
    path.write_text(BAD)
    results = tmp_path / "results"
    extra = ["--workers", "2"] if mode == "multi" else []
    proc = _perfkit("run", "--mode", mode, *extra, "--preset", "tiny", "--workload", f"{path}:{attr}",
                    "--results-dir", str(results), timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    # TensorFlow's own C++ start-up lines (absl, before its log level applies) are not perfkit's
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip() and not TF_NOISE.match(line)]
    assert len(lines) == 1 and message in lines[0] and f"--workload {path}:{attr}" in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    made = [p for p in results.iterdir() if p.name != "datasets"] if results.exists() else []
    assert made == [], made
