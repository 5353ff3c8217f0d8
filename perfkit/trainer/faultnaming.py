"""How the launcher names what went wrong: the stuck worker of a hung cluster and the peers waiting for it,
the workers that never joined, the first of several dead workers and the cause of its death (a peer's
silence, a cut link), a ParameterServerStrategy worker whose death the run survives (``lostworkers.py``),
a chief that never trained through the strategy. A mixin of ``processes.Launcher``, whose state it reads;
kept apart so that the launcher's own module holds starting, watching and stopping.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from perfkit.cluster import is_loopback
from perfkit.trainer import hang
from perfkit.trainer.probe import lost_links, unreachable


@dataclass(frozen=True)
class Failure:
    status: str  # failed | interrupted
    message: str
    details: dict[str, Any]


class FaultNaming:
    """The failures a launcher reports, each naming who and why (see the module docstring)."""

    def _hung(self) -> Failure | None:
        """A formed cluster whose workers all stopped making progress (the processes live, so nothing else
        would end the wait): the worker that stopped first named as the cause, the others as waiting."""
        running = self._watched()
        if not running:
            return None
        quiet = self.progress.quiet(self.clock.monotonic())
        limit, how = self.progress.limit()
        if quiet <= limit:
            return None
        seen = [self._seen(w) for w in running]
        found = hang.diagnose(seen, self.clock.time_ns())
        ceiling = self.hang_timeout if self.hang_timeout is not None else hang.CEILING_S
        if found is None and any(hang.busy(x) for x in seen) and quiet <= max(limit, ceiling):
            return None  # a worker computes outside a collective: slow, not hung
        why = f"no step ended on any worker for {hang.secs(quiet)} s (limit {hang.secs(limit)} s: {how})"
        details = {"quiet_s": round(quiet, 1), "limit_s": round(limit, 1), "limit": how}
        waiting = {"hung": [], "waiting": [x.index for x in seen]}
        # A link lost between hosts (where the run's network can be probed) explains every wait, and is probed
        # first: a waiting worker's stack, sampled at that moment, can sit in Python code and look stuck there.
        lost = lost_links(self.env, self.cluster)  # none where the run has no network of emulated hosts
        if lost:
            text = f"{hang.lost_text(lost)}; their workers are alive and wait in a collective"
            return Failure("failed", f"{text}; {why}", {**waiting, "lost_links": [list(p) for p in lost], **details})
        if found is not None:
            return Failure("failed", f"{found.text}; {why}", {**found.details, **details})
        mine = {w.index for w in self.workers}  # every live worker waits inside TensorFlow, or cannot be told
        text = hang.nobody_stuck(seen, [self._short(t.index) for t in self.cluster.tasks if t.index not in mine])
        return Failure("failed", f"{text}; {why}", {**waiting, **details})

    def _not_formed(self) -> Failure:
        """Name the workers that never joined: local ones that never reached 'connecting', and every
        other worker of the cluster whose port accepts no connection (its process was never started)."""
        local = {w.index: w for w in self.workers}
        stuck = [i for i, w in local.items() if not self._joined(w) and w.status.get("state") != "connecting"]
        others = [spec for spec in self.cluster.tasks if spec.index not in local]
        # TF binds 0.0.0.0:port, so a local peer on one of our own ports would be answered by our worker:
        # such a peer cannot be running here, and is never joined.
        ours = {self.cluster.tasks[i].port for i in local}
        shadowed = {s.index for s in others if is_loopback(s.address) and s.port in ours}
        probed = unreachable([s for s in others if s.index not in shadowed])
        missing = sorted(set(stuck) | shadowed | {spec.index for spec in probed})
        names = ", ".join(self._short(i) for i in missing)
        if not names:
            names = "none: every port answers, yet the cluster did not form (do all hosts use the same cluster file?)"
        what = "tasks" if self.cluster.is_ps else "workers"
        chief = self.cluster.chief
        hint = ("; a parameter-server script's chief joins when it builds tf.distribute.ParameterServerStrategy"
                if chief is not None and chief.index in missing else "")
        return Failure("failed", f"the cluster did not form within {self.connect_timeout:g} s; {what} that never "
                       f"joined: {names}{hint}", {"missing": missing})

    def _chief_alone(self) -> Failure | None:
        """A ParameterServerStrategy chief that exited 0 before the cluster formed, having scheduled no step
        for perfkit's start-up hook to see: the script never trained through the strategy (it ran alone)."""
        chief = next((w for w in self._finishing() if self.cluster.tasks[w.index].role == "chief"), None)
        if chief is None or not getattr(self.spawn, "auto_record", False) or chief.status.get("state"):
            return None
        return Failure("failed", f"{self._short(chief.index)} exited before the cluster formed, having scheduled no "
                       f"step on a worker: the script's chief never trained through "
                       f"tf.distribute.ParameterServerStrategy (--mode ps needs one)", {"missing": [chief.index]})

    def _dead_worker(self) -> Failure | None:
        dead = [w for w in self.workers if w.proc is not None and w.proc.poll() not in (None, 0)]
        if not dead:
            return None
        self._read_statuses()  # what each wrote just before dying (e.g. that it was stopping the profiler)
        dead = [w for w in dead if not self.ends.excused(w.index)]  # a crash after its last step: a warning
        dead = [w for w in dead if w.index not in self.lost.died and not self._survived(w)]
        if not dead:
            return None
        # A peer's death makes the survivors fail within a second with UnavailableError, so several can
        # be found dead in one poll: blame the one that died first, by a signal or of its own error.
        first = min(dead, key=lambda w: (w.proc.returncode >= 0, is_consequence(w.status.get("error")), w.index))
        code, error = first.proc.returncode, first.status.get("error")
        if not error and not self.spawn.reports:  # a user's command: its own last words (a traceback's last line)
            error = next(iter(self._tail(first.index, 1)), None)
        details = {"worker": first.index, "host": first.placement.host, "pid": first.proc.pid, "exit_code": code,
                   "signal": signal.Signals(-code).name if code < 0 else None, "state": first.status.get("state"),
                   "last_log_lines": self._tail(first.index), "profile": first.status.get("profile"),
                   "also_exited": [w.index for w in dead if w is not first]}
        text = f"{self._name(first)} {_exit_text(code)}" + (f": {error}" if error else "")
        if self.lost.died and self.cluster.tasks[first.index].role == "worker":
            text += f"; every other worker had died before it ({', '.join(self._short(i) for i in self.lost.died)})"
        if code > 0 and (not error or is_consequence(error)):
            waited = f"{self._name(first)} {_exit_text(code)} waiting for it" + (f" ({error})" if error else "")
            return self._cause_of_death(waited, text, details) or Failure("failed", text, details)
        return Failure("failed", text, details)

    def _survived(self, w: Any) -> bool:  # w: a processes.Worker
        """A ParameterServerStrategy worker whose death the run survives (lostworkers.py): named, kept, not a
        failure."""
        if not self.lost.survivable(w.index):
            return False
        code = w.proc.returncode
        # a signal's victim wrote nothing of it: its last log line would be noise
        error = w.status.get("error") or (next(iter(self._tail(w.index, 1)), None) if code > 0 else None)
        self.observer.warning(self.lost.record(w.index, self._name(w), code, error))
        return True

    def _cause_of_death(self, waited: str, text: str, details: dict[str, Any]) -> Failure | None:
        """A worker that died of a peer's silence (TF's coordination service gives up on a stopped peer in
        ~13 s): the live peer that stopped or is stuck is the cause; or, every worker alive until then and
        waiting, the link between their hosts."""
        live = [self._seen(w) for w in self.workers if w.proc is not None and w.proc.poll() is None]
        found = hang.diagnose(live, self.clock.time_ns())
        if found is not None:
            return Failure("failed", f"{found.text}; {waited}", {**details, **found.details})
        lost = lost_links(self.env, self.cluster)  # none where the run has no network of emulated hosts
        if not lost:
            return None
        return Failure("failed", f"{hang.lost_text(lost)}; {text}", {**details, "lost_links": [list(p) for p in lost]})

    def _tail(self, index: int, lines: int = 15) -> list[str]:
        try:
            text = (self.run.worker_dir(index) / "worker.log").read_bytes()[-20000:].decode("utf-8", "replace")
        except OSError:
            return []
        return [ln for ln in text.splitlines() if ln.strip()][-lines:]


def is_consequence(error: str | None) -> bool:
    """An error that a worker gets because a peer went away, not a cause of its own. DeadlineExceededError:
    the coordination service's heartbeat to a peer timed out (a cut link: "Collective ops is aborted by:
    Deadline Exceeded", whose first line status.json keeps is only "Graph execution error"). AbortedError: the
    coordination service aborted the collectives, e.g. a survivor starved of CPU beside a peer stuck on a
    lock, whose AbortedError would otherwise be named instead of the stuck peer."""
    low = (error or "").lower()
    return any(k in low for k in ("unavailableerror", "deadlineexceedederror", "aborted"))


def _exit_text(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"
