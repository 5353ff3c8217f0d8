"""bench autorecord's pure parts: reading the example scripts' own epoch lines, the steady step and the
paired ratio. No TensorFlow, no subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.autorecord import (
    ScriptRun,
    Size,
    example_scripts,
    example_summary,
    parse_epochs,
    parse_trained_steps,
    read_output,
    recorded_text,
    steady_step_s,
)
from perfkit.errors import UsageError

SIZE = Size(epochs=3, steps_per_epoch=10, per_worker_batch=64)
# As worker.log holds it under perfkit launch: TensorFlow's logging between the script's own lines.
OUTPUT = """\
I0000 00:00:1796236553.120434   13631 port.cc:153] oneDNN custom operations are on.
epoch 1/3: loss 2.2946 accuracy 0.1172 time 0.470 s
W0000 00:00:1796236554.000783   13631 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not be optimized
epoch 2/3: loss 2.2572 accuracy 0.2000 time 0.100 s
epoch 3/3: loss nan accuracy 0.2492 time 0.120 s
trained 30 steps
"""


def test_epoch_lines_are_read_among_tensorflow_logging() -> None:
    epochs = parse_epochs(OUTPUT)
    assert [(e.index, e.of, e.time_s) for e in epochs] == [(1, 3, 0.47), (2, 3, 0.1), (3, 3, 0.12)]
    assert epochs[0].loss == pytest.approx(2.2946) and epochs[1].accuracy == pytest.approx(0.2)
    assert parse_trained_steps(OUTPUT) == 30
    assert parse_trained_steps("epoch 1/1: loss 1 accuracy 0 time 1 s\n") is None
    # a line that only contains the format (e.g. quoted in a log message) is not an epoch
    assert parse_epochs("INFO: printed 'epoch 1/3: loss 1.0 accuracy 0.5 time 0.3 s'\n") == []


def test_steady_step_leaves_the_first_epoch_out() -> None:
    assert steady_step_s([0.47, 0.10, 0.12], 10) == pytest.approx(0.011)  # median(0.10, 0.12) / 10
    assert steady_step_s([0.5], 10) == pytest.approx(0.05)  # one epoch: the only figure there is
    assert steady_step_s([], 10) is None


def test_complete_output_gives_the_steady_step() -> None:
    run = read_output("x", OUTPUT, SIZE, wall_s=5.0)
    assert run.error is None and run.trained_steps == 30 and run.epoch_s == (0.47, 0.1, 0.12)
    assert run.steady_step_s == pytest.approx(0.011)


@pytest.mark.parametrize(("text", "problem"), [
    (OUTPUT.replace("trained 30 steps", "trained 25 steps"), "trained 25 steps, expected 30"),
    (OUTPUT.replace("trained 30 steps\n", ""), "no 'trained N steps' line"),
    (OUTPUT.replace("epoch 3/3: loss nan accuracy 0.2492 time 0.120 s\n", ""), "2 epoch line(s) of 3"),
])
def test_incomplete_output_is_a_failure_not_a_figure(text: str, problem: str) -> None:
    run = read_output("x", text, SIZE)
    assert run.steady_step_s is None and run.error is not None and problem in run.error


def test_ratio_is_paired_by_round_and_counts_failures() -> None:
    bare = [ScriptRun("b1", 5.0, steady_step_s=0.010), ScriptRun("b2", 5.0, steady_step_s=0.020),
            ScriptRun("b3", 5.0, steady_step_s=0.010)]
    launched = [ScriptRun("l1", 6.0, steady_step_s=0.0101), ScriptRun("l2", 6.0, steady_step_s=0.0202),
                ScriptRun("l3", 6.0, error="exit 1: boom")]
    s = example_summary(bare, launched)
    assert s["ratio"]["values"][:2] == [pytest.approx(1.01), pytest.approx(1.01)]
    assert s["ratio"]["values"][2] is None and s["ratio"]["failed"] == 1 and s["ratio"]["n"] == 2
    assert s["ratio"]["median"] == pytest.approx(1.01) and s["meets_target"] is True
    assert s["command_ratio"]["median"] == pytest.approx(1.2) and s["command_ratio"]["failed"] == 1
    assert s["launched"]["errors"] == ["l3: exit 1: boom"]
    slow = [ScriptRun(f"l{i}", steady_step_s=0.011) for i in range(3)]
    assert example_summary(bare[:1] * 3, slow)["meets_target"] is False  # 1.1 > 1.02
    assert example_summary(bare, [ScriptRun("l", error="x")] * 3)["meets_target"] is None


def test_recorded_steps_in_words() -> None:
    assert recorded_text([150, 150], 150) == "150 of 150"
    assert recorded_text([140, 150], 150) == "140–150 of 150"
    assert recorded_text([0, 0], 150) == "none"
    assert recorded_text([None], 150) == "unknown"


def test_missing_examples_are_a_usage_error_naming_the_path(tmp_path: Path) -> None:
    (tmp_path / "keras_fit").mkdir()
    (tmp_path / "keras_fit" / "train.py").write_text("")
    with pytest.raises(UsageError, match=str(tmp_path / "custom_loop" / "train.py")):
        example_scripts(tmp_path)
    assert set(example_scripts()) == {"keras_fit", "custom_loop"}  # the checkout's own examples are found
