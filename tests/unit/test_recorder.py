"""perfkit.record's context (launcher or TF_CONFIG), its Keras check, and what `perfkit launch` gives a
user's command: its environment, the guard in front of it, and the readiness test on its TF port."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest

from perfkit.cluster import local_cluster
from perfkit.errors import UsageError
from perfkit.results import RunDir
from perfkit.runmeta import RunMeta
from perfkit.trainer.command import UserCommand
from perfkit.trainer.hosts.cpubudget import Placement
from perfkit.trainer.probe import listening
from perfkit.trainer.worker.record import Context, check_keras, record


def test_tf_config_with_a_chief_puts_the_chief_first_and_needs_one_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = {"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cfg))
    monkeypatch.delenv("PERFKIT_RUN_ID", raising=False)
    with pytest.raises(UsageError, match="TF_CONFIG names 3 workers.*PERFKIT_RUN_ID"):
        Context.alone(None, "auto", None)
    monkeypatch.setenv("PERFKIT_RUN_ID", "job 42/7")
    ctx = Context.alone(None, "auto", None)
    assert (ctx.index, ctx.num_workers, ctx.run_id) == (2, 3, "job-42-7")
    assert json.loads(__import__("os").environ["TF_CONFIG"]) == cfg, "read, never changed"


def test_a_broken_tf_config_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(UsageError, match="^TF_CONFIG: not a TensorFlow cluster description"):
        Context.alone(None, "auto", None)


def test_a_launched_worker_reads_its_part_from_the_launch_file(tmp_path: Path) -> None:
    cluster = local_cluster(2, 2.0)
    (tmp_path / "launch.json").write_text(json.dumps({
        "run_id": "r1", "config": {"profile_steps": "5-6", "profile_retries": 1}, "attempt": 2,
        "cluster": cluster.to_dict(), "workers": {"1": {"host": "localhost", "threads": 1, "cores": [1]}}}))
    ctx = Context.from_launcher(tmp_path, 1)
    assert (ctx.index, ctx.num_workers, ctx.run_id, ctx.profile_steps, ctx.attempt, ctx.launched) == \
        (1, 2, "r1", "5-6", 2, True)
    with pytest.raises(UsageError, match="has no worker 0"):
        Context.from_launcher(tmp_path, 0)


def test_keras_3_in_a_process_that_imported_tensorflow_is_refused_not_switched(monkeypatch: pytest.MonkeyPatch) -> None:
    keras3 = types.SimpleNamespace(Model=type("Model", (), {"__module__": "keras.src.models.model"}))
    monkeypatch.setitem(sys.modules, "tensorflow", types.SimpleNamespace(keras=keras3))
    monkeypatch.setitem(sys.modules, "keras", types.SimpleNamespace(__version__="3.15.1"))
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    with pytest.raises(UsageError, match="Keras 3.15.1, not tf-keras.*TF_USE_LEGACY_KERAS=1"):
        check_keras()
    assert "TF_USE_LEGACY_KERAS" not in __import__("os").environ
    legacy = types.SimpleNamespace(Model=type("Model", (), {"__module__": "tf_keras.src.engine.training"}))
    monkeypatch.setitem(sys.modules, "tensorflow", types.SimpleNamespace(keras=legacy))
    check_keras()


def test_record_wants_a_positive_global_batch_that_divides_among_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", types.SimpleNamespace(keras=types.SimpleNamespace(
        Model=type("Model", (), {"__module__": "tf_keras.x"}))))
    with pytest.raises(UsageError, match="global_batch must be a positive int"):
        record(global_batch=0)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:1", "c:1"]},
                                                "task": {"type": "worker", "index": 0}}))
    with pytest.raises(UsageError, match="global_batch 64 does not divide among 3 workers"):
        record(global_batch=64, run_id="x")
    with pytest.raises(UsageError, match="inside 'with perfkit.record"):
        record(global_batch=63, run_id="x").callbacks


def test_a_users_command_gets_its_own_tf_config_and_thread_caps_never_the_launchers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["elsewhere:1"]}}')
    cluster = local_cluster(2, 2.0)
    run = RunDir(tmp_path / "r", RunMeta.new("r"))
    cmd = UserCommand.checked([sys.executable, "train.py", "--x"], multi=True)
    env = cmd.environment(run, cluster, Placement(1, "localhost", [1], 1, 1.0))
    assert json.loads(env["TF_CONFIG"]) == cluster.tf_config(1)
    assert env["PERFKIT_WORKER_INDEX"] == "1" and env["PERFKIT_RUN_DIR"] == str((tmp_path / "r").resolve())
    assert (env["TF_NUM_INTRAOP_THREADS"], env["TF_NUM_INTEROP_THREADS"]) == ("1", "1")
    argv = cmd.command(run, Placement(1, "localhost", [1], 1, 1.0))
    assert argv[-3:] == [sys.executable, "train.py", "--x"] and argv[argv.index("--") - 1] == "1"
    single = UserCommand.checked([sys.executable, "train.py"], multi=False)
    assert "TF_CONFIG" not in single.environment(run, cluster, Placement(0, "localhost", None, None, None))
    assert not single.forms_cluster and cmd.forms_cluster


@pytest.mark.parametrize("argv", [[], ["no-such-program-here"], ["./missing/train.sh"]])
def test_a_command_that_cannot_run_is_refused_before_any_worker_starts(argv: list[str]) -> None:
    with pytest.raises(UsageError, match="after '--'|is not an executable on PATH or a file"):
        UserCommand.checked(argv, multi=True)


def test_the_guard_pins_then_becomes_the_command(tmp_path: Path) -> None:
    import os

    code = "import os; print(sorted(os.sched_getaffinity(0)), os.getpid())"
    proc = subprocess.Popen([sys.executable, "-m", "perfkit.trainer.worker.guard", str(os.getpid()), "0", "--",
                             sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert out.split() == ["[0]", str(proc.pid)], "pinned, and the same process (exec, not a child)"
    missing = subprocess.run([sys.executable, "-m", "perfkit.trainer.worker.guard", str(os.getpid()), "-", "--",
                              str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 127 and "cannot run" in missing.stderr


def test_listening_sees_a_listening_port_and_not_a_closed_one() -> None:
    import os

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not listening(os.getpid(), port)
        s.listen()
        assert listening(os.getpid(), port)


def test_half_a_launcher_environment_is_refused_not_taken_for_a_run_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", types.SimpleNamespace(keras=types.SimpleNamespace(
        Model=type("Model", (), {"__module__": "tf_keras.x"}))))
    monkeypatch.setenv("PERFKIT_RUN_DIR", "/tmp/somewhere")
    monkeypatch.setenv("PERFKIT_WORKER_INDEX", "one")
    with pytest.raises(UsageError, match="PERFKIT_RUN_DIR='/tmp/somewhere', PERFKIT_WORKER_INDEX='one'"):
        record(global_batch=64)
