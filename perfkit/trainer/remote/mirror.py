"""The launching host's live copy of a run on SSH hosts (``perfkit launch --hosts``), for ``perfkit watch``:
each host's agent relays its workers' status, heartbeat and process (as that host reads them) once a
second, and this writes them under ``<results>/.live/<run id>/`` as a run's own workers write theirs, with a
run.json of the whole cluster and this process as its launcher. Only what a watcher reads is mirrored, never
the records (they come back at the end); the mirror is removed when the run ends."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from perfkit.cluster import ClusterSpec
from perfkit.config import sanitize_id
from perfkit.profiler.procinfo import PROC_FILE
from perfkit.results import LIVE_DIR, RunDir, write_json
from perfkit.runmeta import ClusterRecord, RunMeta
from perfkit.trainer.worker.heartbeat import HEARTBEAT_FILE

log = logging.getLogger(__name__)


class Mirror:
    """``<results>/.live/<run id>/``: created with the run, written by ``write``, removed by ``close``. A
    failure to write it is logged once and never stops the run."""

    def __init__(self, results_dir: Path, run_id: str, cluster: ClusterSpec, mode: str) -> None:
        self.path: Path | None = None
        self._warned = False
        try:
            run = RunDir.create(Path(results_dir) / LIVE_DIR, run_id, RunMeta.new(
                run_id, mode=mode, cluster=ClusterRecord.of(cluster.to_dict(), num_workers=cluster.num_workers),
                launch={"mirror": "a run on SSH hosts, mirrored while it trains; its records come back at the end"}))
            write_json(run.path / "launch.json", {"launcher_pid": os.getpid()})
            self.path = run.path
        except Exception as exc:  # noqa: BLE001 - the live view is optional; the run is not
            self._warn(exc)

    def write(self, live: dict[str, Any]) -> None:
        """One worker's relayed state: ``{"worker": i, "status": {...}, "beat": {...}, "beat_age_s": s, "proc":
        {...} | None}``; the heartbeat's time is set from its age on its own host (hosts' clocks differ)."""
        if self.path is None:
            return
        try:
            wdir = self.path / "workers" / sanitize_id(str(int(live["worker"])))
            wdir.mkdir(parents=True, exist_ok=True)
            beat, age = live.get("beat"), live.get("beat_age_s")
            if isinstance(beat, dict) and isinstance(age, (int, float)):  # its age, not another host's clock
                live = {**live, "beat": {**beat, "t_wall_ns": time.time_ns() - int(age * 1e9)}}
            for name, key in (("status.json", "status"), (HEARTBEAT_FILE, "beat")):
                if isinstance(live.get(key), dict) and live[key]:
                    write_json(wdir / name, live[key])
            write_json(wdir / PROC_FILE, live["proc"] if isinstance(live.get("proc"), dict) else {"gone": True})
        except Exception as exc:  # noqa: BLE001 - a full disk or a bad line: the run goes on
            self._warn(exc)

    def close(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None

    def _warn(self, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            log.warning("live mirror for perfkit watch: %s", exc)
