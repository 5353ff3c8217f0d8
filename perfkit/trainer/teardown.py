"""The end of a worker whose steps are behind it: from its last step to its process's exit, watched apart
from hangs.

A worker that ran the last step of its fit says ``finishing`` (``worker/fitpart.py``, at Keras'
``on_train_end``) and ``done`` once its recorder closed; what is left is its process's exit, which can take
a while with no step to come. TensorFlow 2.21 is the main cause: at the end of ``fit`` under
MultiWorkerMirroredStrategy, destroying the distributed dataset's iterator waits for tf.data's autotuner
thread to wake for its next pass, whose period doubles to a minute, so the tail is anything from 0 to about
60 s, bare or under perfkit (docs/troubleshooting.md). A hang limit made for steps would call that a hang,
so once every watched worker is past its steps the launcher asks this module instead:
- nothing is called hung; each worker has ``FINISH_S`` from its last step to exit (up to ``hang.CEILING_S``
  while it computes: a script saving or evaluating after ``fit``), and one that runs out is stopped with a
  warning naming where its main thread was; the run stays complete, since every step was recorded;
- a worker that does not say so (a custom loop, a command that records nothing) is past its steps once a peer
  exited 0: synchronous workers run the same steps;
- a worker killed by a signal after its steps (a crash in TensorFlow's exit handlers) is a warning too; a
  worker that exits with an error code after its steps is the script's own failure and still fails the run;
- a teardown longer than ``SLOW_S`` is reported with its seconds, and every worker's is kept in run.json
  (``workers[].teardown``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfkit.trainer import hang

PAST_STEPS = ("finishing", "done")  # states after a worker's last step: only its process's exit is left
FINISH_S = 300.0  # from a worker's last step to its exit, before it is stopped (while it does not compute)
SLOW_S = 10.0  # a teardown at least this long is worth a warning


def past_steps(status: dict[str, Any]) -> bool:
    return status.get("state") in PAST_STEPS


def steps_ended_ns(status: dict[str, Any]) -> int | None:
    """When the worker said its steps were behind it (its first finishing or done state), wall clock."""
    for phase in status.get("phases") or ():
        if isinstance(phase, dict) and phase.get("state") in PAST_STEPS and isinstance(phase.get("t_wall_ns"), int):
            return int(phase["t_wall_ns"])
    return int(status["t_wall_ns"]) if past_steps(status) and isinstance(status.get("t_wall_ns"), int) else None


@dataclass
class Ends:
    """Each worker's end as the launcher sees it in one attempt."""

    steps_ended: dict[int, int] = field(default_factory=dict)  # wall ns of its last step (finishing/done)
    exited: dict[int, int] = field(default_factory=dict)  # wall ns its exit was seen
    codes: dict[int, int] = field(default_factory=dict)
    where: dict[int, str] = field(default_factory=dict)  # its main thread, from its last heartbeat
    stopped: dict[int, str] = field(default_factory=dict)  # why perfkit stopped it

    def observe(self, index: int, status: dict[str, Any], beat: dict[str, Any] | None, code: int | None,
                now_ns: int) -> None:
        ended = steps_ended_ns(status)
        if ended is not None and index not in self.steps_ended:
            self.steps_ended[index] = ended
        if index in self.steps_ended and index not in self.exited and beat is not None:
            inside_fit = status.get("state") == "finishing"  # past fit's last step, before fit returned
            self.where[index] = place(beat) + (", in fit's teardown" if inside_fit else "")
        if code is not None and index not in self.exited:
            self.exited[index], self.codes[index] = now_ns, code

    def assume_ended(self, index: int, wall_ns: int) -> None:
        """Its steps are behind it though it did not say so (a peer finished): from ``wall_ns`` on."""
        self.steps_ended.setdefault(index, wall_ns)

    def excused(self, index: int) -> bool:
        """Killed by a signal after its last step: a teardown crash, not a failed run."""
        return index in self.steps_ended and self.codes.get(index, 0) < 0 and index not in self.stopped

    def overdue(self, seen: list[hang.Seen], now_ns: int) -> list[hang.Seen]:
        """The live workers past their steps whose time to exit ran out."""
        out = []
        for s in seen:
            ended = self.steps_ended.get(s.index)
            if ended is None:
                continue
            if (now_ns - ended) / 1e9 > (hang.CEILING_S if hang.busy(s) else FINISH_S):
                out.append(s)
        return out

    def stop(self, seen: list[hang.Seen], now_ns: int) -> None:
        for s in seen:
            secs = (now_ns - self.steps_ended[s.index]) / 1e9
            where = self.where.get(s.index, "where unknown")
            self.stopped[s.index] = (f"{s.name} had not exited {hang.secs(secs)} s after its last step ({where}, "
                                     f"{hang.cpu_text(s)}): stopped; every step it ran is recorded")

    def seconds(self, index: int) -> float | None:
        ended, exited = self.steps_ended.get(index), self.exited.get(index)
        if ended is None or exited is None:
            return None
        return round(max(0.0, (exited - ended) / 1e9), 2)

    def record(self, index: int) -> dict[str, Any] | None:
        """run.json's ``workers[].teardown``: seconds from the last step to exit, and how it ended."""
        if index not in self.steps_ended:
            return None
        return {"s": self.seconds(index), "where": self.where.get(index), "stopped": index in self.stopped,
                "signal_after_steps": self.excused(index)}

    def notes(self, names: dict[int, str]) -> list[str]:
        """Warnings for the run's end: workers stopped or killed after their steps, each; the slow exits in one
        line (a cluster's workers mostly wait alike)."""
        out = list(self.stopped.values())
        slow = []
        for index in sorted(self.steps_ended):
            secs, name = self.seconds(index), names.get(index, f"worker {index}")
            if index in self.stopped or secs is None:
                continue
            if self.excused(index):
                out.append(f"{name} was killed by signal {-self.codes[index]} {hang.secs(secs)} s after its last "
                           f"step (in its teardown; every step it ran is recorded)")
            elif secs >= SLOW_S:
                slow.append((index, secs, name))
        if slow:
            lo, hi = min(s for _, s, _ in slow), max(s for _, s, _ in slow)
            took = hang.secs(lo) if hang.secs(lo) == hang.secs(hi) else f"{hang.secs(lo)}-{hang.secs(hi)}"
            first = slow[0]
            who = first[2] if len(slow) == 1 else f"{len(slow)} workers"
            where = self.where.get(first[0], "where unknown")
            where = where if len(slow) == 1 else f"{first[2]}: {where}"
            out.append(f"{who} took {took} s from {'its' if len(slow) == 1 else 'their'} last step to exit ({where}); "
                       f"see docs/troubleshooting.md#slow-exit")
        return out

def place(beat: dict[str, Any]) -> str:
    main = beat.get("main") or {}
    kind = main.get("kind")
    what = {"tensorflow": "inside TensorFlow", "user": "in its own code", "perfkit": "inside perfkit"}.get(
        str(kind), "in Python")
    file = str(main.get("file") or "").rsplit("/", 1)[-1]
    return f"its main thread {what} at {file}:{main.get('line')} in {main.get('function')}" if file else \
        f"its main thread {what}"

