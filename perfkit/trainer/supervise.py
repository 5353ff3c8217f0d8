"""Attempts of a run: restart the cluster after a death (``--max-restarts``) or after TF's profiler crashed
a worker (docs/tf-profiler-crash.md), and turn how the last attempt ended into the run's exception."""

from __future__ import annotations

import time
from typing import Any

from perfkit.errors import RunFailed, RunInterrupted
from perfkit.results import RunDir
from perfkit.trainer.faultnaming import Failure
from perfkit.trainer.processes import Launcher


def profiler_crash(failure: Failure) -> bool:
    """A worker killed by a signal while its TF profiler capture was starting or stopping.

    TF 2.21's TraceMeRecorder can corrupt memory when a capture stops while MultiWorkerMirroredStrategy's
    threads are recording (SIGSEGV/SIGABRT in TraceMeRecorder::Stop, seen in a few runs in ten on a loaded
    2-core machine); it is never perfkit's training that failed.
    """
    state = (failure.details.get("profile") or {}).get("status")
    return bool(failure.details.get("signal")) and state in ("starting", "capturing", "stopping")


def supervise(launcher: Launcher, max_restarts: int, write_launch: Any, recover_profiler: bool = False,
              profile_retries: int = 0) -> tuple[Failure | None, list[dict[str, Any]]]:
    """Run attempts until success, a failure with no restarts left, or Ctrl-C.

    With ``recover_profiler``, a worker killed inside a profiler capture (TF's own crash,
    docs/tf-profiler-crash.md) costs a restart that does not count against ``max_restarts``: the cluster
    resumes from the last completed epoch and, while ``profile_retries`` last, traces the window again
    (moved to a later epoch if the resumed run has passed it); after that it resumes without profiling.
    ``write_launch(attempt, spec)`` gets the window of each attempt: None (as configured), "A-B" or "off".
    """
    restarts: list[dict[str, Any]] = []
    attempt, spec, used, retries = 0, None, 0, profile_retries
    while True:
        write_launch(attempt, spec)
        launcher.start()
        try:
            failure = launcher.wait()
        except KeyboardInterrupt:
            launcher.interrupt()
            return Failure("interrupted", "interrupted (Ctrl-C, SIGTERM or SIGHUP)", {}), restarts
        if failure is None:
            return None, restarts
        launcher.interrupt()  # what each worker recorded is saved, a hung one's included
        crash = recover_profiler and spec != "off" and profiler_crash(failure)
        if (not crash and used >= max_restarts) or "missing" in failure.details or _disk_full(launcher):
            return failure, restarts
        attempt += 1
        used += 0 if crash else 1
        if crash:
            spec, retries = _retry_spec(launcher, failure, retries)
        restarts.append({"attempt": attempt, "after": failure.message, "t_wall_ns": time.time_ns(),
                         "profiler_crash": crash, "profile_steps": spec,
                         "profiles": {str(w.index): w.profile for w in launcher.worker_records()}})
        why = (f"inside TensorFlow's profiler; tracing steps {spec} again" if crash and spec != "off" else
               "inside TensorFlow's profiler; resuming without profiling" if crash else
               f"restart {used} of {max_restarts}")
        launcher.observer.phase(f"restarting the cluster ({why}): {failure.message}")


def _disk_full(launcher: Launcher) -> bool:
    """A results disk that refuses writes ends the run: a restart could record nothing (not even its launch)."""
    from perfkit._atomic import disk_refuses

    run = getattr(launcher, "run", None)
    return run is not None and disk_refuses(run.path) is not None


def _retry_spec(launcher: Launcher, failure: Failure, retries: int) -> tuple[str, int]:
    """The window the resumed cluster traces after a profiler crash, and the retries left; "off" when
    none are left or no epoch is left for the window."""
    from perfkit.profiler.tracewindow import Window, later_window

    window = (failure.details.get("profile") or {}).get("window") or {}
    statuses = [w.status for w in launcher.workers]
    # The window counts executions: batches unless several run per call (--steps-per-execution).
    spe = statuses[0].get("executions_per_epoch") or statuses[0].get("steps_per_epoch")
    epochs = statuses[0].get("epochs")
    if retries <= 0 or not window:
        return "off", 0
    if not spe or not epochs:  # a custom loop's length is unknown ahead: its command starts over, same window
        return f"{window['first']}-{window['last']}", retries - 1
    done = min(int(st.get("epochs_done", 0)) for st in statuses) * int(spe)
    later = later_window(Window(int(window["first"]), int(window["last"])), done, int(spe), int(epochs))
    return (f"{later.first}-{later.last}", retries - 1) if later else ("off", 0)


def raise_for(failure: Failure | None, run: RunDir) -> None:
    if failure is None:
        return
    if failure.status == "interrupted":
        raise RunInterrupted(f"run {run.path.name} interrupted; what was recorded is kept in {run.path}")
    raise RunFailed(f"run {run.path.name} failed: {failure.message} (logs in {run.path / 'workers'})")
