"""A user's own command as the launcher's worker (``perfkit launch -- python train.py ...``).

The launcher, its placement, CPU budgets, sampler, death and stall detection are the ones ``perfkit run``
uses; only what is started differs. Each worker's command gets what a cluster scheduler would give it:
``TF_CONFIG`` (multi mode; the launcher's own is never passed on), and ``PERFKIT_RUN_DIR`` /
``PERFKIT_WORKER_INDEX`` for ``perfkit.record`` to find its part of the run. TensorFlow's thread pools are
capped through ``TF_NUM_INTRAOP_THREADS`` / ``TF_NUM_INTEROP_THREADS``, which TensorFlow reads when it
starts, and the cores are pinned by ``perfkit.trainer.guard`` before the command starts.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from perfkit.cluster import ClusterSpec
from perfkit.errors import UsageError
from perfkit.results import RunDir
from perfkit.trainer.cpubudget import Placement
from perfkit.trainer.launcher import worker_env

RUN_DIR_VAR = "PERFKIT_RUN_DIR"
INDEX_VAR = "PERFKIT_WORKER_INDEX"


@dataclass(frozen=True)
class UserCommand:
    argv: tuple[str, ...]
    multi: bool  # False: one process, no TF_CONFIG (the single-mode baseline)
    tf_config: str | None = None  # a scheduler's own TF_CONFIG: passed on unchanged instead of perfkit's

    reports = False  # a script without perfkit.record writes no status.json
    forms_cluster = property(lambda self: self.multi)

    @classmethod
    def checked(cls, argv: list[str], multi: bool, tf_config: str | None = None) -> UserCommand:
        """The command after ``--``, its program found now rather than as N failed workers."""
        if not argv:
            raise UsageError("perfkit launch: give the command to run after '--', e.g. "
                             "perfkit launch --workers 2 -- python train.py")
        prog = argv[0]
        if shutil.which(prog) is None and not (os.sep in prog and Path(prog).is_file()):
            raise UsageError(f"command: {prog!r} is not an executable on PATH or a file")
        return cls(tuple(argv), multi, tf_config)

    def command(self, run: RunDir, placement: Placement) -> list[str]:
        cores = ",".join(str(c) for c in placement.cores) if placement.cores else "-"
        return [sys.executable, "-m", "perfkit.trainer.guard", str(os.getpid()), cores, "--", *self.argv]

    def environment(self, run: RunDir, cluster: ClusterSpec, placement: Placement) -> dict[str, str]:
        env = worker_env()
        if self.multi:
            env["TF_CONFIG"] = self.tf_config or json.dumps(cluster.tf_config(placement.index))
        env[RUN_DIR_VAR], env[INDEX_VAR] = str(run.path.resolve()), str(placement.index)
        if placement.threads:
            env["TF_NUM_INTRAOP_THREADS"] = str(placement.threads)
            env["TF_NUM_INTEROP_THREADS"] = str(max(1, min(2, placement.threads)))
        # MultiWorkerMirroredStrategy needs tf-keras (keras-team/keras#20585); a user's own setting wins.
        env.setdefault("TF_USE_LEGACY_KERAS", "1")
        return env
