"""The fork server: ``python -m perfkit.trainer.worker.zygote REQUEST_FD REPLY_FD``.

TensorFlow's import is three quarters of a worker's CPU before its first step (about 6 CPU s here), and N
local workers used to pay it N times on cores that the cluster shares. This process pays it once: it imports
everything perfkit's worker needs, without creating TensorFlow's runtime (no context, no device, no server:
those are made after the fork, in each worker), then forks one worker per request.

Each worker is forked twice (a short-lived middle process exits at once), so that the launcher, a child
subreaper (``processes``), becomes its parent: it waits for the worker, reads its exit status and rusage,
and is the parent whose death the worker's parent-death signal follows, exactly as for a worker it started
itself. Requests and replies are JSON lines on two pipes (never stdout: an import may print there).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

from perfkit._libc import enter_netns, set_parent_death_signal, set_thread_name

PRELOAD = ("tensorflow", "tf_keras", "pandas", "pyarrow", "perfkit.trainer.worker.main", "perfkit.trainer.worker.fit",
           "perfkit.trainer.worker.strategy", "perfkit.trainer.worker.ps", "perfkit.trainer.worker.calibrate",
           "perfkit.profiler.tracewindow", "perfkit.workloads", "perfkit.workloads.botdetector.model")
REPARENT_WAIT_S = 5.0
EXIT_NOT_STARTED = 127


def preload() -> dict[str, Any]:
    """Import what every worker imports; what it cost (wall and CPU seconds) for run.json."""
    import importlib

    from perfkit._tf import prepare_env

    wall, cpu = time.monotonic(), time.process_time()
    prepare_env()  # Keras 2 (tf-keras), which TensorFlow decides at its import
    for name in PRELOAD:
        importlib.import_module(name)
    from tensorflow.python.eager import context

    if getattr(context, "_context", None) is not None:  # a runtime made before the fork would be shared
        raise RuntimeError("TensorFlow's runtime was created during the preload; workers cannot be forked")
    from perfkit.trainer.worker.part import process_started_ns

    return {"import_s": round(time.monotonic() - wall, 3), "import_cpu_s": round(time.process_time() - cpu, 3),
            "threads": len(os.listdir("/proc/self/task")), "started_wall_ns": process_started_ns(),
            "ready_wall_ns": time.time_ns()}


def serve(requests: int, replies: int) -> int:
    """Fork a worker per request line until the launcher closes its end (EOF) or dies."""
    inbox, outbox = os.fdopen(requests, "r", encoding="utf-8"), os.fdopen(replies, "w", encoding="utf-8")
    try:
        ready = {"ready": True, "pid": os.getpid(), **preload()}
    except Exception as exc:  # noqa: BLE001 - said to the launcher, which reports it
        traceback.print_exc()
        ready = {"ready": False, "error": f"{type(exc).__name__}: {exc}"}
    _reply(outbox, ready)
    if not ready["ready"]:
        return 1
    for line in inbox:
        try:
            _reply(outbox, {"pid": fork_worker(json.loads(line), (requests, replies))})
        except Exception as exc:  # noqa: BLE001 - one refused request; the launcher reports it
            _reply(outbox, {"error": f"{type(exc).__name__}: {exc}"})
    return 0


def _reply(out: Any, payload: dict[str, Any]) -> None:
    out.write(json.dumps(payload) + "\n")
    out.flush()


def fork_worker(request: dict[str, Any], own_fds: tuple[int, int]) -> int:
    """Fork the worker of ``request`` through a middle process; the worker's pid."""
    read_pid, write_pid = os.pipe()
    middle = os.fork()
    if middle == 0:  # the middle process: a new session, the worker, and gone
        code = 1
        try:
            os.close(read_pid)
            os.setsid()  # the worker's own session, as start_new_session gives: the launcher decides its end
            worker = os.fork()
            if worker == 0:
                os.close(write_pid)
                _become_worker(request, own_fds, os.getppid())
            os.write(write_pid, str(worker).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_pid)
    with os.fdopen(read_pid, "rb") as got:
        text = got.read().decode()
    os.waitpid(middle, 0)
    if not text:
        raise RuntimeError("the worker's middle process exited without forking it")
    return int(text)


def _become_worker(request: dict[str, Any], own_fds: tuple[int, int], middle: int) -> None:
    """In the forked worker: wait to be the launcher's child, take the request's place (network namespace,
    log, directory, environment, arguments), and run perfkit's worker; never returns."""
    code = EXIT_NOT_STARTED
    try:
        for fd in own_fds:
            os.close(fd)
        _redirect(request["log"])
        deadline = time.monotonic() + REPARENT_WAIT_S
        while os.getppid() == middle and time.monotonic() < deadline:
            time.sleep(0.0005)  # until the middle process is gone and the launcher adopted this one
        if request.get("netns") and not enter_netns(request["netns"]):
            raise OSError(f"cannot enter the network namespace {request['netns']}")
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from perfkit.trainer.worker import main as worker

        sys.argv = [worker.__file__, *request["args"]]  # as ``python -m perfkit.trainer.worker.main`` has it
        # Its command line stays the fork server's; top and ps -o comm show this name instead.
        set_thread_name(f"perfkit-w{request['args'][-1]}")
        _fresh_state()
        worker.main(list(request["args"]))  # exits the process itself
    except BaseException:  # noqa: BLE001 - the worker's log says why it could not start
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(code)


def _redirect(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)


def _fresh_state() -> None:
    """What a new interpreter would not share with its siblings: numpy's global random state (Python's own
    ``random`` is reseeded at fork by the interpreter)."""
    import numpy as np

    np.random.seed(int.from_bytes(os.urandom(4), "little"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    import signal

    set_parent_death_signal(signal.SIGKILL)  # never outlive the launcher (EOF on its pipe says it too)
    return serve(int(args[0]), int(args[1]))


if __name__ == "__main__":
    sys.exit(main())
