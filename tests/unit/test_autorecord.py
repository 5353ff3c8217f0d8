"""perfkit's start-up hook without TensorFlow: the post-import hook, the sitecustomize that chains to the one it
shadows, the choice of a custom loop's step function, the global batch read from what fit is given, the
claim that keeps a second process from writing the same part, and launch's new flags."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfkit.errors import UsageError
from perfkit.trainer.command import STARTUP_DIR
from perfkit.trainer.worker import imports
from perfkit.trainer.worker.chooser import REPEATS_FOR_STEP, StepChooser
from perfkit.trainer.worker.session import claim, dataset_batch, global_batch_of


def _python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith("PERFKIT_")} | env
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=full, cwd=cwd)


def test_a_hook_runs_after_the_module_is_imported_and_at_once_if_it_already_is(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkhook_target.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    imports.when_imported("pkhook_target", lambda m: seen.append(m.VALUE + 1))
    assert seen == [] and "pkhook_target" not in sys.modules
    import pkhook_target  # noqa: F401

    assert seen == [42]
    imports.when_imported("pkhook_target", lambda m: seen.append(m.VALUE))
    assert seen == [42, 41]


def test_a_failing_hook_costs_the_recording_not_the_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkhook_broken.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    imports.when_imported("pkhook_broken", lambda m: 1 / 0)
    import pkhook_broken

    assert pkhook_broken.VALUE == 1


def test_the_startup_hook_steps_aside_and_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS_RAN = True\n")
    code = textwrap.dedent(f"""
        import builtins, sys
        assert getattr(builtins, "THEIRS_RAN", False), "the user's sitecustomize did not run"
        assert {str(STARTUP_DIR)!r} not in sys.path, "perfkit's startup directory stayed on sys.path"
        assert "tensorflow" not in sys.modules and "pandas" not in sys.modules, "the hook imported too much"
        from perfkit.trainer.worker.session import STATE
        print("session" if STATE.session is not None else "none")
    """)
    pythonpath = f"{STARTUP_DIR}:{theirs}"
    hooked = _python(code, {"PYTHONPATH": pythonpath, "PERFKIT_AUTO_RECORD": "1", "PERFKIT_RUN_DIR": str(tmp_path),
                            "PERFKIT_WORKER_INDEX": "0"}, tmp_path)
    assert hooked.returncode == 0 and hooked.stdout.strip() == "session", hooked.stderr[-2000:]
    off = _python(code, {"PYTHONPATH": pythonpath}, tmp_path)
    assert off.returncode == 0 and off.stdout.strip() == "none", off.stderr[-2000:]


def _fn(name: str) -> SimpleNamespace:
    return SimpleNamespace(__name__=name)


def test_the_function_that_runs_strategy_run_is_the_step_from_its_first_call() -> None:
    chooser, setup, step = StepChooser(), _fn("build"), _fn("train_step")
    assert chooser.called(setup, 0, 1) == []
    chooser.strategy_run(step)  # during its first call (the trace)
    assert chooser.called(step, 2, 3) == [(2, 3)]
    assert chooser.is_step(step) and not chooser.is_step(setup)
    assert chooser.called(step, 4, 5) == [(4, 5)] and chooser.called(setup, 6, 7) == []
    assert chooser.describe() == {"name": "train_step", "rule": "Strategy.run",
                                  "top_level_calls": {"train_step": 2, "build": 2}}


def test_without_a_strategy_the_first_function_called_repeatedly_is_the_step_with_its_earlier_calls() -> None:
    chooser, once, step = StepChooser(), _fn("init"), _fn("step")
    chooser.called(once, 0, 1)
    got = [chooser.called(step, 10 * i, 10 * i + 5) for i in range(REPEATS_FOR_STEP + 1)]
    assert got[:-2] == [[]] * (REPEATS_FOR_STEP - 1)
    assert got[-2] == [(10 * i, 10 * i + 5) for i in range(REPEATS_FOR_STEP)], "the earlier calls count"
    assert got[-1] == [(10 * REPEATS_FOR_STEP, 10 * REPEATS_FOR_STEP + 5)]
    assert chooser.rule == "repeated"


def test_a_named_step_function_wins_over_strategy_run() -> None:
    chooser, other, named = StepChooser(named="my_step"), _fn("train_step"), _fn("my_step")
    chooser.strategy_run(other)
    assert chooser.called(other, 0, 1) == [] and chooser.is_step(named)
    assert chooser.called(named, 2, 3) == [(2, 3)] and chooser.rule == "--step-function"


class _Batched:
    """Stands for tf.data's pipeline stages (``_batch_size`` on a batch stage, ``_input_dataset`` upstream)."""

    element_spec = None
    _variant_tensor = None

    def __init__(self, upstream: object = None, batch: int | None = None) -> None:
        self._input_dataset = upstream
        if batch is not None:
            self._batch_size = batch


def test_the_global_batch_is_read_from_what_fit_is_given() -> None:
    pipeline = _Batched(_Batched(_Batched(None), batch=256))  # prefetch(batch(map(...)))
    assert dataset_batch(pipeline) == 256 and global_batch_of(pipeline) == 256
    assert global_batch_of(SimpleNamespace(_original_dataset=pipeline)) == 256, "a distributed dataset"
    assert global_batch_of(_Batched(_Batched(None))) is None, "no batch stage: unknown"
    assert global_batch_of(SimpleNamespace(shape=(100, 3)), 64) == 64
    assert global_batch_of([SimpleNamespace(shape=(100, 3))]) == 32, "Keras' default batch for arrays"
    assert global_batch_of(iter([])) is None and global_batch_of(None) is None


def test_only_the_first_process_of_a_worker_records_it(tmp_path: Path) -> None:
    assert claim(tmp_path / "workers" / "0") is True
    assert claim(tmp_path / "workers" / "0") is False
    assert claim(tmp_path / "workers" / "1") is True


def test_launch_flags_for_the_hook_are_checked() -> None:
    from perfkit.config import Mode
    from perfkit.trainer.options import ClusterFlags, RecordFlags, launch_options

    flags = ClusterFlags(connect_timeout=30.0, hang_timeout="60")
    with pytest.raises(UsageError, match="--step-function: 'train step' is not a function name"):
        launch_options(["python", "x.py"], Mode.single, flags, RecordFlags(step_function="train step"))
    with pytest.raises(UsageError, match="--no-auto-record"):
        launch_options(["python", "x.py"], Mode.single, flags,
                       RecordFlags(step_function="train_step", auto_record=False))
    lopts, _ = launch_options(["python", "x.py"], Mode.single, flags, RecordFlags(step_function="Trainer.train_step"))
    assert lopts.command.step_function == "Trainer.train_step" and lopts.command.auto_record
