"""``perfkit launch``: a user's own command started once per worker, under the launcher ``perfkit run``
uses (placement, CPU budgets, sampler, connect/stall/death detection, Ctrl-C, restarts), into one run.

A Python command's Keras ``fit`` or custom training loop is recorded into its worker's part (steps, epochs,
the trace window) through perfkit's start-up hook (``worker/startup``, ``worker/auto``) or its own
``perfkit.record``; any command gets each process's CPU, memory and exit status, and a run without steps is
compared as a whole command.

The launcher, its placement, CPU budgets, sampler, death and stall detection are the ones ``perfkit run``
uses; only what is started differs. Each worker's command gets what a cluster scheduler would give it:
``TF_CONFIG`` (multi mode; the launcher's own is never passed on), and ``PERFKIT_RUN_DIR`` /
``PERFKIT_WORKER_INDEX`` for ``perfkit.record`` to find its part of the run. TensorFlow's thread pools are
capped through ``TF_NUM_INTRAOP_THREADS`` / ``TF_NUM_INTEROP_THREADS``, which TensorFlow reads when it
starts, and the cores are pinned by ``perfkit.trainer.worker.guard`` before the command starts.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit._atomic import write_error
from perfkit._started import begin_run
from perfkit._tf import legacy_switch
from perfkit.cluster import ClusterSpec
from perfkit.config import Mode, sanitize_id
from perfkit.errors import UsageError
from perfkit.events import NullObserver, Observer
from perfkit.results import RunDir
from perfkit.runmeta import RunMeta
from perfkit.trainer.forkserver import worker_env
from perfkit.trainer.hosts.cpubudget import Placement
from perfkit.trainer.hosts.hostenv import HostEnv
from perfkit.trainer.multi import (
    MultiOptions,
    Supervision,
    placement_meta,
    placements_payload,
    run_dir_id,
    supervise_run,
    warn_setup,
)
from perfkit.trainer.worker.env import AUTO_VAR, STEP_FUNCTION_VAR
from perfkit.trainer.worker.part import INDEX_VAR, RUN_DIR_VAR, command_identity, plan_config

log = logging.getLogger(__name__)

# Holds the sitecustomize.py that installs perfkit.trainer.worker.auto in the launched interpreter.
STARTUP_DIR = Path(__file__).resolve().parent / "worker" / "startup"


@dataclass(frozen=True)
class UserCommand:
    argv: tuple[str, ...]
    multi: bool  # False: one process, no TF_CONFIG (the single-mode baseline)
    tf_config: str | None = None  # a scheduler's own TF_CONFIG: passed on unchanged instead of perfkit's
    auto_record: bool = True  # perfkit's start-up hook in the command's Python (docs/own-script.md)
    step_function: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # variables the user named for the command (--env): set last

    reports = False  # a command that never trains (or is not Python) writes no status.json
    forms_cluster = property(lambda self: self.multi)

    @classmethod
    def checked(cls, argv: list[str], multi: bool, tf_config: str | None = None, auto_record: bool = True,
                step_function: str | None = None, env: tuple[tuple[str, str], ...] = ()) -> UserCommand:
        """The command after ``--``, its program found now rather than as N failed workers."""
        if not argv:
            raise UsageError("perfkit launch: give the command to run after '--', e.g. "
                             "perfkit launch --workers 2 -- python train.py")
        prog = argv[0]
        if shutil.which(prog) is None and not (os.sep in prog and Path(prog).is_file()):
            raise UsageError(f"command: {prog!r} is not an executable on PATH or a file")
        return cls(tuple(argv), multi, tf_config, auto_record, step_function, env)

    def command(self, run: RunDir, placement: Placement) -> list[str]:
        cores = ",".join(str(c) for c in placement.cores) if placement.cores else "-"
        return [sys.executable, "-m", "perfkit.trainer.worker.guard", str(os.getpid()), cores, "--", *self.argv]

    def environment(self, run: RunDir, cluster: ClusterSpec, placement: Placement) -> dict[str, str]:
        env = worker_env()
        if self.multi:
            env["TF_CONFIG"] = self.tf_config or json.dumps(cluster.tf_config(placement.index))
        env[RUN_DIR_VAR], env[INDEX_VAR] = str(run.path.resolve()), str(placement.index)
        if placement.threads:
            env["TF_NUM_INTRAOP_THREADS"] = str(placement.threads)
            # A ParameterServerStrategy server with one inter-op thread hangs on the first step it is sent
            # (docs/ps-mode.md): two at least, in every task of such a cluster.
            env["TF_NUM_INTEROP_THREADS"] = str(2 if cluster.is_ps else max(1, min(2, placement.threads)))
        # MultiWorkerMirroredStrategy needs tf-keras (keras-team/keras#20585); a user's own setting wins. Before
        # TensorFlow 2.16 tf.keras is Keras 2 already and the switch means nothing: not set.
        if legacy_switch():
            env.setdefault("TF_USE_LEGACY_KERAS", "1")
        if self.auto_record:
            env[AUTO_VAR] = "1"
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(STARTUP_DIR), env.get("PYTHONPATH")) if p)
            if self.step_function:
                env[STEP_FUNCTION_VAR] = self.step_function
        else:
            env.pop(AUTO_VAR, None)
        env.update(dict(self.env))  # named by the user: theirs, even TF_CONFIG for a single-mode baseline
        return env


@dataclass(frozen=True)
class LaunchOptions:
    command: UserCommand
    mode: Mode
    profile_steps: str = "auto"
    profile_retries: int = 3
    sample_interval: float = 0.5
    label: str | None = None

    def config(self) -> dict[str, Any]:
        """run.json's config: what the analysis reads (epochs and batch are filled in from the recorder)."""
        return {"mode": self.mode.value, "workload": "command", "epochs": None, "batch_size": None,
                "profile_steps": self.profile_steps, "profile_retries": self.profile_retries,
                "sample_interval": self.sample_interval, "label": self.label}


def run_launch(lopts: LaunchOptions, opts: MultiOptions, results_dir: str | Path, observer: Observer | None = None,
               run_id: str | None = None) -> Path:
    observer = observer or NullObserver()
    begin_run()  # its "command to first step" counts from here when the command ran a run before
    results_dir = Path(results_dir)
    rid = run_dir_id(run_id, opts, lopts.mode.value, lopts.label)
    dir_name = f"{rid}--{sanitize_id(opts.part)}" if opts.part else rid
    RunDir.path_for(results_dir, dir_name)
    env = HostEnv.setup(opts.cluster, opts.local_workers, opts.part, opts.emulate, opts.pin, opts.allow_unenforced,
                        dir_name)
    try:
        warn_setup(env, observer)
        config = lopts.config()
        run = RunDir.create(results_dir, dir_name, RunMeta.new(
            rid, mode=lopts.mode.value, config=config, workload=command_identity(list(lopts.command.argv)),
            launch={"command": list(lopts.command.argv), "recorded": None}, **placement_meta(opts, env)))
        env.janitor.register("glob", run.path / "tensorboard" / ".capture-*")
        env.janitor.register("run", run.path)  # marked interrupted by the janitor if this process dies
        observer.run_opened(run.path)

        def payload(attempt: int, spec: str | None) -> dict[str, Any]:
            return {"run_id": rid, "config": {**config, "profile_steps": spec or lopts.profile_steps},
                    "cluster": env.cluster.to_dict(), "launcher_pid": os.getpid(), "attempt": attempt,
                    "connect_timeout": opts.connect_timeout, "workers": placements_payload(env),
                    "command": list(lopts.command.argv)}

        try:
            # A worker killed inside TF's profiler (docs/tf-profiler-crash.md) costs the cluster a restart of the
            # command, as in perfkit's own runs, when perfkit placed the trace window (the start-up hook).
            recover = lopts.command.auto_record and lopts.profile_steps != "off" and opts.part is None
            supervise_run(run, env, opts, observer, Supervision(
                payload, lopts.sample_interval, lopts.profile_steps, recover_profiler=recover,
                profile_retries=lopts.profile_retries, spawn=lopts.command))
        finally:
            _record_plan(run, config)
        return run.path
    finally:
        for line in env.close():
            observer.warning(f"could not remove {line}")


def _record_plan(run: RunDir, config: dict[str, Any]) -> None:
    """The plan the workers' recorders reported (epochs, global batch, what the steps are), or that none
    recorded anything."""
    plans = [plan for w in run.meta.workers if w.plan is not None for plan in [w.plan.to_dict()] if plan]
    plan = plans[0] if plans else None
    # A chief that scheduled steps through ClusterCoordinator trained under ParameterServerStrategy.
    coordinated = {"strategy": "ParameterServerStrategy"} if plan and plan.get("coordinator") else {}
    try:
        run.update(config={**config, **plan_config(plan)}, **coordinated,
                   launch={**run.meta.launch, "recorded": bool(plans), "steps": steps_source(plan)})
    except OSError as exc:  # a full or read-only results disk, already reported by the run's end if it failed
        log.warning("the launched command's plan is not in run.json: %s", write_error(exc))


def steps_source(plan: dict[str, Any] | None) -> str | None:
    """What a launched command's steps are, in words: Keras fit's batches or a custom loop's function calls."""
    if not plan:
        return None
    fn = plan.get("step_function")
    if not fn:
        return "Keras fit's batches" + (", each run on a worker through ClusterCoordinator" if plan.get("coordinator")
                                        else "")
    why = {"Strategy.run": "it runs Strategy.run", "--step-function": "named by --step-function",
           "repeated": "the first tf.function called repeatedly",
           "scheduled first": "the first function the chief scheduled"}.get(str(fn.get("rule")), str(fn.get("rule")))
    where = ", each run on a worker through ClusterCoordinator" if plan.get("coordinator") else ""
    return f"calls of tf.function {fn.get('name')} ({why}){where}"
