"""Under ParameterServerStrategy a worker that dies does not end the run: TensorFlow's ``ClusterCoordinator``
puts the step it was running back in its queue and the other workers run it and every later step (the
tutorial's "worker failure" case; a cluster manager may restart the worker, which then rejoins). So perfkit,
for its own ``run --mode ps`` and a launched script alike, names the death, keeps it in run.json
(``workers[].died``) and lets the chief go on: failing the run would measure a job its users never see fail,
and the analysis says the figures are of a cluster that lost a worker. A parameter server or the chief that
dies still fails the run (the job cannot go on without either), and so does the death of the last worker.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

from perfkit.cluster import ClusterSpec
from perfkit.trainer.clock import SYSTEM, Clock


@dataclass
class LostWorkers:
    """The workers of a ParameterServerStrategy cluster that died while the run went on."""

    cluster: ClusterSpec
    clock: Clock = SYSTEM
    died: dict[int, dict[str, Any]] = field(default_factory=dict)

    def survivable(self, index: int) -> bool:
        """A worker (not a parameter server or the chief) of a ParameterServerStrategy cluster, while another
        worker of the cluster is still there to run the steps."""
        task = self.cluster.tasks[index]
        if not self.cluster.is_ps or task.role != "worker":
            return False
        others = [t.index for t in self.cluster.workers if t.index != index and t.index not in self.died]
        return bool(others)

    def record(self, index: int, name: str, code: int, error: str | None) -> str:
        """Keep the death; the warning that names it."""
        self.died[index] = {"exit_code": code, "signal": signal.Signals(-code).name if code < 0 else None,
                            "at_wall_ns": self.clock.time_ns(), "error": error}
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        return (f"{name} {how}{f': {error}' if error else ''}; the run goes on: TensorFlow's coordinator runs its "
                f"steps on the other workers (docs/ps-mode.md#faults)")

    def of(self, index: int) -> dict[str, Any] | None:
        return self.died.get(index)
