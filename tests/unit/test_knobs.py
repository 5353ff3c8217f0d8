"""The trainer's tuning knobs (``perfkit.config.Knobs``, docs/tuning.md): their checks, their record in
run.json, the modes they apply to, and what the step recorder and the trace window make of several batches
per execution (no TensorFlow: the Keras callbacks are driven by hand, on a plain base class)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfkit.config import Knobs, Mode, RunConfig
from perfkit.errors import UsageError
from perfkit.profiler import steps as steps_mod
from perfkit.profiler import tracewindow
from perfkit.profiler.steps import StepLog
from perfkit.profiler.tracewindow import CaptureTarget, TraceCapture, Window, executions_per_epoch, resolve
from perfkit.workloads import checked


def test_the_defaults_are_what_perfkit_did_before_the_knobs() -> None:
    k = Knobs()
    assert k.to_dict() == {"steps_per_execution": 1, "metrics": "full", "bytes_per_pack": 0, "all_reduce": "ring",
                           "prefetch": "auto"}
    assert k.changed() == {} and k.describe() == ""


@pytest.mark.parametrize("fields,message", [
    ({"steps_per_execution": 0}, "--steps-per-execution: 0 is not an integer >= 1"),
    ({"steps_per_execution": True}, "--steps-per-execution"),
    ({"metrics": "some"}, "--metrics: 'some' is not one of full, minimal"),
    ({"bytes_per_pack": -1}, "--bytes-per-pack: -1 is not an integer >= 0"),
    ({"all_reduce": "tree"}, "--all-reduce: 'tree' is not one of ring, auto, nccl"),
    ({"prefetch": "-1"}, "--prefetch: '-1' is not 'auto' or an integer >= 0"),
    ({"prefetch": "lots"}, "--prefetch: 'lots' is not 'auto'"),
])
def test_a_bad_knob_is_one_line_naming_the_flag_and_the_choices(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message) as err:
        Knobs(**fields)
    assert "\n" not in str(err.value)


def test_knobs_are_normalised_and_round_trip() -> None:
    k = Knobs(steps_per_execution=4, metrics=" Minimal", bytes_per_pack=262144, all_reduce="AUTO", prefetch="4")
    assert (k.metrics, k.all_reduce, k.prefetch) == ("minimal", "auto", 4)
    assert Knobs(prefetch=" Auto ").prefetch == "auto" and Knobs(prefetch=0).prefetch == 0
    assert Knobs.from_dict(k.to_dict()) == k
    assert k.describe() == "steps_per_execution=4, metrics=minimal, bytes_per_pack=262144, all_reduce=auto, prefetch=4"
    assert Knobs(steps_per_execution=4, metrics="minimal").describe() == "steps_per_execution=4, metrics=minimal"


def test_the_run_config_records_the_knobs_and_reads_them_back() -> None:
    cfg = RunConfig.from_preset(Mode.multi, "tiny", knobs=Knobs(steps_per_execution=4, metrics="minimal"))
    d = cfg.to_dict()
    assert d["knobs"] == {"steps_per_execution": 4, "metrics": "minimal", "bytes_per_pack": 0, "all_reduce": "ring",
                          "prefetch": "auto"}
    assert RunConfig.from_dict(d) == cfg


def test_a_config_recorded_before_the_knobs_loads_with_the_defaults() -> None:
    old = RunConfig.from_preset(Mode.single, "tiny").to_dict()
    del old["knobs"]  # run.json / launch.json written before the knobs existed
    cfg = RunConfig.from_dict(old)
    assert cfg.knobs == Knobs()
    partial = {**old, "knobs": {"metrics": "minimal", "a_later_knob": 1}}  # a later writer's unknown key is left out
    assert RunConfig.from_dict(partial).knobs == Knobs(metrics="minimal")


def test_the_window_of_a_config_counts_executions() -> None:
    knobs = Knobs(steps_per_execution=4)  # tiny: 8 batches an epoch -> 2 executions, 4 in 2 epochs
    assert checked(RunConfig.from_preset(Mode.single, "tiny", knobs=knobs, profile_steps="3-4")).profile_steps == "3-4"
    with pytest.raises(UsageError, match=r"--profile-steps: 3-5 ends after the last training step \(4 = 2 epochs"):
        checked(RunConfig.from_preset(Mode.single, "tiny", knobs=knobs, profile_steps="3-5"))
    assert executions_per_epoch(10, 4) == 3 and executions_per_epoch(8, 4) == 2 and executions_per_epoch(8, 1) == 8
    assert resolve("auto", executions_per_epoch(58, 8), 3) == Window(11, 16), "K unknown: 10 executions"
    assert resolve("auto", executions_per_epoch(58, 8), 3, 8) == Window(10, 11), "10 batches: 2 executions of 8"


def test_prefetch_zero_is_refused_for_a_users_workload_only() -> None:
    assert RunConfig.from_preset(Mode.single, "tiny", knobs=Knobs(prefetch=0)).knobs.prefetch == 0
    with pytest.raises(UsageError, match="--prefetch: 0 .* cannot take one out of --workload my.py:w"):
        RunConfig.from_preset(Mode.single, "tiny", workload="my.py:w", knobs=Knobs(prefetch=0))
    assert RunConfig.from_preset(Mode.single, "tiny", workload="my.py:w", knobs=Knobs(prefetch=3)).knobs.prefetch == 3


def test_each_knob_applies_to_the_strategies_that_have_it() -> None:
    k = Knobs(steps_per_execution=4, metrics="minimal", bytes_per_pack=1024, all_reduce="auto", prefetch=2)
    assert k.not_applied("multi") == {} and k.for_mode("multi") == k
    assert k.not_applied("single") == {"bytes_per_pack": 1024, "all_reduce": "auto"}
    assert k.for_mode("single") == Knobs(steps_per_execution=4, metrics="minimal", prefetch=2)
    assert k.for_mode("ps") == Knobs(metrics="minimal", prefetch=2)
    with pytest.raises(UsageError, match=r"^--bytes-per-pack: only with --mode multi .*--mode single has none$"):
        k.check_mode("single")
    with pytest.raises(UsageError, match=r"^--steps-per-execution: only with --mode single or --mode multi"):
        Knobs(steps_per_execution=2).check_mode("ps")
    Knobs(metrics="minimal", prefetch=0).check_mode("ps")  # these apply everywhere


def test_compare_applies_each_knob_where_it_exists_and_records_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    import perfkit.machine as machine
    from perfkit.trainer.options import knobs_for_modes

    monkeypatch.setattr(machine, "nvidia_gpus", lambda: 0)
    k = Knobs(steps_per_execution=4, bytes_per_pack=262144)
    per_mode = knobs_for_modes(k, ["single", "multi"])
    assert per_mode["multi"] == (k, {})
    single, meta = per_mode["single"]
    assert single == Knobs(steps_per_execution=4)
    assert meta["knobs_not_applied"]["knobs"] == {"bytes_per_pack": 262144}
    with pytest.raises(UsageError, match="^--all-reduce: nccl needs NVIDIA GPUs"):
        knobs_for_modes(Knobs(all_reduce="nccl"), ["single", "multi"])
    knobs_for_modes(Knobs(all_reduce="nccl"), ["single"])  # no multi run: nothing to refuse
    monkeypatch.setattr(machine, "nvidia_gpus", lambda: 2)
    assert knobs_for_modes(Knobs(all_reduce="nccl"), ["single", "multi"])["multi"][0].all_reduce == "nccl"


def test_gpus_hidden_by_cuda_visible_devices_count_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfkit.machine import nvidia_gpus

    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert nvidia_gpus() == 0
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvidia_gpus() >= 0


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    from perfkit.cli import main

    code = main(argv)
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("args,flag", [
    (["--mode", "single", "--bytes-per-pack", "65536"], "--bytes-per-pack: only with --mode multi"),
    (["--mode", "single", "--all-reduce", "auto"], "--all-reduce: only with --mode multi"),
    (["--mode", "ps", "--workers", "2", "--steps-per-execution", "2"], "--steps-per-execution: only with"),
    (["--mode", "multi", "--workers", "2", "--metrics", "none"], "--metrics: 'none' is not one of full, minimal"),
    (["--mode", "multi", "--workers", "2", "--prefetch", "x"], "--prefetch: 'x'"),
])
def test_run_refuses_a_knob_in_one_line_before_anything_runs(args: list[str], flag: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(["run", "--preset", "tiny", "--results-dir", str(tmp_path), *args], capsys)
    assert code == 2 and len(err) == 1 and flag in err[0], err
    assert not any(tmp_path.iterdir())


def test_nccl_without_gpus_is_refused_by_run_and_compare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import perfkit.machine as machine

    monkeypatch.setattr(machine, "nvidia_gpus", lambda: 0)
    for argv in (["run", "--mode", "multi", "--workers", "2"], ["compare"]):
        code, err = _cli([*argv, "--preset", "tiny", "--results-dir", str(tmp_path), "--all-reduce", "nccl"], capsys)
        assert code == 2 and len(err) == 1 and "--all-reduce: nccl needs NVIDIA GPUs" in err[0], err


class _Stop(Exception):
    pass


def test_compare_gives_every_run_the_knobs_its_strategy_has(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import perfkit.cli.compare as compare_cli
    from perfkit.cli import main

    seen: list[tuple[Any, dict[str, Any]]] = []

    def fake_train_once(cfg: Any, opts: Any, results_dir: Path, run_id: Any, quiet: bool, **extra: Any) -> Path:
        seen.append((cfg, extra))
        if len(seen) == 2:
            raise _Stop
        return results_dir / "base"

    monkeypatch.setattr(compare_cli, "train_once", fake_train_once)
    with pytest.raises(_Stop):
        main(["compare", "--preset", "tiny", "--results-dir", str(tmp_path), "--quiet", "--steps-per-execution", "4",
              "--metrics", "minimal", "--bytes-per-pack", "262144"])
    (single, single_extra), (multi, multi_extra) = seen
    assert multi.knobs == Knobs(steps_per_execution=4, metrics="minimal", bytes_per_pack=262144) and not multi_extra
    assert single.knobs == Knobs(steps_per_execution=4, metrics="minimal")
    assert single_extra["extra_meta"]["knobs_not_applied"]["knobs"] == {"bytes_per_pack": 262144}


# -- several batches per execution: the step recorder and the trace window ------------------------------

class _Base:
    """Stands for tf-keras' Callback (no TensorFlow in the unit tests)."""

    def __init__(self) -> None:
        pass


def _executions(steps_per_epoch: int, k: int) -> list[tuple[int, int]]:
    """(first, last) batch of each execution, as tf-keras' data handler calls the batch hooks."""
    return [(b, min(b + k, steps_per_epoch) - 1) for b in range(0, steps_per_epoch, k)]


def test_the_step_recorder_keeps_one_record_per_execution_with_its_batches_samples() -> None:
    from tests.unit.test_steps import FakeClock

    log, told = StepLog(samples_per_step=128, clock=FakeClock()), []
    cb = steps_mod.keras_callback(log, on_step=lambda e, s, logs: told.append((e, s)), base=_Base)
    for epoch in range(2):
        cb.on_epoch_begin(epoch)
        for first, last in _executions(10, 4):
            cb.on_train_batch_begin(first)
            cb.on_train_batch_end(last, {})
        cb.on_epoch_end(epoch, {"loss": 0.5})
    frame = log.steps_frame()
    assert frame[["epoch", "step", "samples"]].values.tolist() == [
        [0, 0, 512], [0, 4, 512], [0, 8, 256], [1, 0, 512], [1, 4, 512], [1, 8, 256]]
    assert frame.groupby("epoch")["samples"].sum().tolist() == [1280, 1280]  # every batch of the epoch, once
    assert told == [(0, 3), (0, 7), (0, 9), (1, 3), (1, 7), (1, 9)]  # progress in batches done, as before


def test_one_batch_per_call_records_exactly_as_before() -> None:
    from tests.unit.test_steps import FakeClock

    log = StepLog(samples_per_step=64, clock=FakeClock())
    cb = steps_mod.keras_callback(log, base=_Base)
    cb.on_epoch_begin(0)
    for b in range(3):
        cb.on_train_batch_begin(b)
        cb.on_train_batch_end(b, {})
    log.step_begin()  # a caller that does not say where the step began: numbered by its end, one batch
    log.step_end(3)
    assert log.steps_frame()[["step", "samples"]].values.tolist() == [[0, 64], [1, 64], [2, 64], [3, 64]]


class _Profiler:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.logdir = ""

    def start(self, logdir: str) -> None:
        self.calls.append("start")
        self.logdir = logdir

    def stop(self) -> None:
        self.calls.append("stop")
        out = Path(self.logdir) / "plugins/profile/2026_12_03_12_00_00/vm.xplane.pb"
        out.parent.mkdir(parents=True)
        out.write_bytes(b"xplane")


def _traced(tmp_path: Path, window: Window, steps_per_epoch: int, k: int, epochs: int = 2) -> tuple[list[str], Any]:
    """Drive the trace window's callback through ``epochs`` epochs of executions; which ran traced."""
    prof, seen = _Profiler(), []
    capture = TraceCapture(window, CaptureTarget(tmp_path, "s", "h-w0"), prof.start, prof.stop)
    cb = tracewindow.keras_callback(capture, steps_per_epoch, base=_Base, steps_per_execution=k)
    for epoch in range(epochs):
        cb.on_epoch_begin(epoch)
        for first, last in _executions(steps_per_epoch, k):
            cb.on_train_batch_begin(first)
            if capture.active:
                seen.append(f"{epoch}:{first}")
            cb.on_train_batch_end(last)
        cb.on_test_begin()
        cb.on_epoch_end(epoch)
    cb.on_train_end()
    assert prof.calls == ["start", "stop"] and capture.result["status"] == "captured"
    return seen, capture


def test_the_trace_window_is_placed_and_triggered_in_executions(tmp_path: Path) -> None:
    # 10 batches an epoch at K=4: executions (0-3), (4-7), (8-9); auto = early in the second epoch.
    window = resolve("auto", executions_per_epoch(10, 4), 2, 4)
    assert window == Window(5, 6)  # ceil(10/4) = 3 executions after ceil(2/4) = 1 cold one, clipped to the epoch
    seen, capture = _traced(tmp_path, window, 10, 4)
    assert seen == ["1:4", "1:8"]  # the second epoch's second execution and its short last one (the sixth)
    assert capture.result["window"] == {"first": 5, "last": 6}


def test_an_explicit_window_counts_global_executions_across_epochs(tmp_path: Path) -> None:
    # 8 batches an epoch at K=4: executions 1, 2 in the first epoch, 3, 4 in the second.
    seen, _ = _traced(tmp_path / "a", Window(2, 3), 8, 4)
    assert seen == ["0:4", "1:0"]
    seen, _ = _traced(tmp_path / "b", Window(3, 4), 8, 4)  # starts with the epoch (not across validation)
    assert seen == ["1:0", "1:4"]


def test_the_window_with_one_batch_per_execution_is_unchanged(tmp_path: Path) -> None:
    seen, _ = _traced(tmp_path, Window(11, 16), 8, 1)
    assert seen == [f"1:{b}" for b in range(2, 8)]


def test_a_model_compiled_with_several_steps_per_execution_is_read_as_such() -> None:
    from perfkit.workloads.compiled import minimal_metrics, steps_per_execution_of

    class Var:
        def __init__(self, v: int) -> None:
            self.v = v

        def numpy(self) -> int:
            return self.v

    class TfKeras:
        _steps_per_execution = Var(8)

    class Keras3:
        steps_per_execution = 4

    assert steps_per_execution_of(TfKeras()) == 8 and steps_per_execution_of(Keras3()) == 4
    assert steps_per_execution_of(object()) == 1

    class AUC:
        name = "auc"

    class Acc:
        name = "binary_accuracy"

    auc, acc = AUC(), Acc()
    assert minimal_metrics(["accuracy", auc, "precision"]) == ["accuracy"]
    assert minimal_metrics({"out": [acc, auc], "aux": "mse"}) == {"out": [acc], "aux": []}
    assert minimal_metrics(None) is None and minimal_metrics(auc) == []


def test_replace_keeps_knobs_a_dataclass() -> None:
    cfg = RunConfig.from_preset(Mode.multi, "tiny")
    again = replace(cfg, knobs={"steps_per_execution": 2})  # a dict (e.g. from JSON) becomes Knobs
    assert again.knobs == Knobs(steps_per_execution=2)
