"""``perfkit launch``: a user's own command started once per worker, under the launcher ``perfkit run``
uses (placement, CPU budgets, sampler, connect/stall/death detection, Ctrl-C, restarts), into one run.

A command that uses ``perfkit.record`` records its steps, epochs and trace window into its worker's part;
one that does not still gets each process's CPU, memory and exit status, and the analysis lists the run as
one without step records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.config import Mode, sanitize_id
from perfkit.profiler.recording import plan_config, command_identity
from perfkit.results import RunDir
from perfkit.trainer.command import UserCommand
from perfkit.trainer.events import NullObserver, Observer
from perfkit.trainer.hostenv import HostEnv
from perfkit.trainer.multi import (MultiOptions, Supervision, placement_meta, placements_payload, run_dir_id,
                                   supervise_run, warn_setup)


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
    results_dir = Path(results_dir)
    rid = run_dir_id(run_id, opts, lopts.mode.value, lopts.label)
    dir_name = f"{rid}--{sanitize_id(opts.part)}" if opts.part else rid
    RunDir.path_for(results_dir, dir_name)
    env = HostEnv.setup(opts.cluster, opts.local_workers, opts.part, opts.emulate, opts.pin, opts.allow_unenforced,
                        dir_name)
    try:
        warn_setup(env, observer)
        config = lopts.config()
        run = RunDir.create(results_dir, dir_name, {
            "run_id": rid, "mode": lopts.mode.value, "strategy": None, "preset": None, "config": config,
            "workload": command_identity(list(lopts.command.argv)),
            "launch": {"command": list(lopts.command.argv), "recorded": None}, **placement_meta(opts, env)})
        env.janitor.register("glob", run.path / "tensorboard" / ".capture-*")

        def payload(attempt: int, spec: str | None) -> dict[str, Any]:
            return {"run_id": rid, "config": {**config, "profile_steps": spec or lopts.profile_steps},
                    "cluster": env.cluster.to_dict(), "launcher_pid": os.getpid(), "attempt": attempt,
                    "connect_timeout": opts.connect_timeout, "workers": placements_payload(env),
                    "command": list(lopts.command.argv)}

        try:
            supervise_run(run, env, opts, observer, Supervision(payload, lopts.sample_interval, lopts.profile_steps,
                                                                spawn=lopts.command))
        finally:
            _record_plan(run, config)
        return run.path
    finally:
        for line in env.close():
            observer.warning(f"could not remove {line}")


def _record_plan(run: RunDir, config: dict[str, Any]) -> None:
    """The plan the workers' recorders reported (epochs, global batch), or that none recorded anything."""
    plans = [w.get("plan") for w in run.meta.get("workers") or [] if w.get("plan")]
    run.update(config={**config, **plan_config(plans[0] if plans else None)},
               launch={**run.meta["launch"], "recorded": bool(plans)})
