"""Which top-level ``tf.function`` of a custom training loop is its training step (plain Python: the patches
in ``auto`` and ``session`` tell it about the calls).

In this order: the one named by ``--step-function`` (its name or qualified name); else the first whose call
runs ``Strategy.run``; else, in a loop with no strategy, the first called three times at top level (training
steps repeat, set-up functions run once). The choice and the call counts go into run.json.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

REPEATS_FOR_STEP = 3  # without a strategy: a top-level function called this often is the step


def function_name(fn: Any) -> str:
    return str(getattr(fn, "__name__", None) or getattr(fn, "_name", None) or type(fn).__name__)


@dataclass
class StepChooser:
    named: str | None = None
    chosen: int | None = None  # id() of the step function
    name: str | None = None
    rule: str | None = None  # "--step-function" | "Strategy.run" | "repeated"
    strategy_seen: bool = False
    calls: Counter[str] = field(default_factory=Counter)  # top-level calls per function name
    _firsts: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    def is_step(self, fn: Any) -> bool:
        if self.chosen is None and self.named is not None and self.named in (
                function_name(fn), getattr(getattr(fn, "python_function", None), "__qualname__", None)):
            self._choose(fn, "--step-function")
        return self.chosen == id(fn)

    def strategy_run(self, fn: Any) -> None:
        """``Strategy.run`` was called inside the top-level call of ``fn``."""
        self.strategy_seen = True
        if self.chosen is None and self.named is None:
            self._choose(fn, "Strategy.run")

    def called(self, fn: Any, start_ns: int, end_ns: int) -> list[tuple[int, int]]:
        """A top-level call ended: the steps it makes (with the earlier calls of a function just chosen)."""
        self.calls[function_name(fn)] += 1
        key = id(fn)
        if self.chosen is None:
            pending = self._firsts.setdefault(key, [])
            pending.append((start_ns, end_ns))
            if self.named is None and not self.strategy_seen and len(pending) >= REPEATS_FOR_STEP:
                self._choose(fn, "repeated")
        if self.chosen != key:
            return []
        steps = self._firsts.pop(key, [])
        self._firsts.clear()
        if not steps or steps[-1] != (start_ns, end_ns):
            steps.append((start_ns, end_ns))
        return steps

    def _choose(self, fn: Any, rule: str) -> None:
        self.chosen, self.name, self.rule = id(fn), function_name(fn), rule

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "rule": self.rule, "top_level_calls": dict(self.calls.most_common(10))}
