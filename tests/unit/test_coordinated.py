"""A ParameterServerStrategy chief's recorder (worker/coordinated.py) fed as TensorFlow's coordinator would feed
it, with no TensorFlow: steps per worker, a custom loop's epochs at join(), steps lost on a dying worker; the
policy for a dead worker (trainer/lostworkers.py); a one-worker ps run of a command as a baseline."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from perfkit.cluster import ClusterSpec, HostSpec
from perfkit.results import RunMeta
from perfkit.trainer.lostworkers import LostWorkers
from perfkit.trainer.worker.coordinated import CoordinatorPart


@dataclass(frozen=True)
class Ctx:
    run_dir: Path
    index: int = 3
    num_workers: int = 2
    host: str = "localhost"
    attempt: int = 0


def step_fn() -> None:
    """Stands for the script's tf.function: the recorder knows it by its name."""


def eval_fn() -> None:
    """Another scheduled function: not a step."""


def test_a_custom_loops_steps_land_on_the_worker_that_ran_them_and_its_epochs_end_at_join(tmp_path: Path) -> None:
    part = CoordinatorPart(Ctx(tmp_path), None, keras=False)
    part.batch_seen(128)
    for epoch in range(2):
        tags = [part.closure_made(step_fn) for _ in range(3)]
        assert part.closure_made(eval_fn) is None
        for k, tag in enumerate(tags):
            assert tag is not None and tag[:2] == (epoch, k)
            part.executed(k % 2, tag, 1_000 + k, 2_000 + k)
        part.joined()
    part.failed(1, ConnectionError("Socket closed"))
    part.end(None)
    steps = [pd.read_parquet(tmp_path / "workers" / str(w) / "steps.parquet") for w in (0, 1)]
    assert [len(s) for s in steps] == [4, 2] and (steps[0]["samples"] == 128).all()
    assert list(steps[0]["step"]) == [0, 2, 0, 2] and list(steps[0]["epoch"]) == [0, 0, 1, 1]
    epochs = pd.read_parquet(tmp_path / "workers" / "3" / "epochs.parquet")
    assert list(epochs["epoch"]) == [0, 1]
    status = json.loads((tmp_path / "workers" / "3" / "status.json").read_text())
    assert status["state"] == "done"
    plan = status["plan"]
    assert plan["epochs"] == 2 and plan["steps_per_epoch"] == 3 and plan["global_batch"] == 128
    assert plan["step_function"]["name"] == "step_fn" and plan["step_function"]["rule"] == "scheduled first"
    assert plan["step_function"]["scheduled"] == {"step_fn": 6, "eval_fn": 2}
    assert plan["coordinator"]["steps_per_worker"] == [4, 2]
    assert plan["coordinator"]["lost_steps"] == {"1": 1}
    assert plan["coordinator"]["lost_errors"] == {"1": "ConnectionError: Socket closed"}


def test_a_named_step_function_and_a_late_step_after_the_end_are_handled(tmp_path: Path) -> None:
    part = CoordinatorPart(Ctx(tmp_path), "eval_fn", keras=False)
    assert part.closure_made(step_fn) is None
    tag = part.closure_made(eval_fn)
    part.executed(0, tag, 10, 20)
    part.end(None)  # a loop that ends without a last join: its epoch still counts
    part.executed(1, tag, 30, 40)  # a coordinator thread finishing late writes nothing more
    assert part.counts() == [1, 0]
    assert len(pd.read_parquet(tmp_path / "workers" / "3" / "epochs.parquet")) == 1


def _cluster(workers: int) -> ClusterSpec:
    return ClusterSpec((HostSpec("a", "127.0.0.1", 2.0, workers, 23456, ps=1, chief=True),))


def test_a_dead_worker_is_survivable_while_another_is_left_and_a_ps_never_is() -> None:
    lost = LostWorkers(_cluster(2))
    assert lost.survivable(0) and not lost.survivable(2)  # task 2: the ps
    text = lost.record(0, "worker 0 (a 127.0.0.1:23456)", -9, None)
    assert "was killed by SIGKILL" in text and "the run goes on" in text
    assert lost.of(0)["signal"] == "SIGKILL" and not lost.survivable(1)  # the last worker
    assert not LostWorkers(ClusterSpec((HostSpec("a", "127.0.0.1", 2.0, 2, 23456),))).survivable(0)  # MWMS


@pytest.mark.parametrize(("mode", "workers", "name", "kind"), [
    ("single", 1, "command", "SINGLE"), ("ps", 1, "command", "PS_ONE_WORKER"), ("ps", 2, "command", None),
    ("ps", 1, "botdetector", None), ("multi", 1, "command", None),
])
def test_what_can_be_a_baseline(mode: str, workers: int, name: str, kind: str | None) -> None:
    from perfkit.analysis.select import BaselineKind, baseline_kind

    meta = RunMeta.parse({"schema_version": 1, "run_id": "r", "status": "complete", "mode": mode,
                          "workload": {"name": name}, "cluster": {"num_workers": workers}}, "r/run.json")
    assert baseline_kind(meta) is (BaselineKind[kind] if kind else None)
