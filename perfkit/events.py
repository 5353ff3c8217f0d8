"""What a run tells whoever watches it (the CLI's progress display); the trainer itself never prints."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol


class Observer(Protocol):
    def run_opened(self, path: Path) -> None: ...

    def phase(self, text: str) -> None: ...

    def warning(self, text: str) -> None: ...

    def training_started(self, epochs: int, steps_per_epoch: int, cpu: Callable[[], float | None]) -> None: ...

    def step(self, epoch: int, step: int, logs: Mapping[str, Any]) -> None: ...

    def epoch(self, epoch: int, row: Mapping[str, Any]) -> None: ...

    def training_finished(self) -> None: ...

    def output(self, source: str, line: str) -> None: ...


class NullObserver:
    """Watches nothing: for ``--quiet`` and for library use."""

    def run_opened(self, path: Path) -> None:
        """The run's directory, once created (``--live`` reads the run there)."""

    def phase(self, text: str) -> None:
        pass

    def warning(self, text: str) -> None:
        pass

    def training_started(self, epochs: int, steps_per_epoch: int, cpu: Callable[[], float | None]) -> None:
        pass

    def step(self, epoch: int, step: int, logs: Mapping[str, Any]) -> None:
        pass

    def epoch(self, epoch: int, row: Mapping[str, Any]) -> None:
        pass

    def training_finished(self) -> None:
        pass

    def output(self, source: str, line: str) -> None:
        """A line a worker printed on another host (``perfkit launch --hosts``), ``source`` naming it."""


class Tee:
    """Every event to each of ``observers`` in turn: a run's own live status beside the command's display."""

    def __init__(self, *observers: Observer) -> None:
        self._each = observers

    def run_opened(self, path: Path) -> None:
        for o in self._each:
            o.run_opened(path)

    def phase(self, text: str) -> None:
        for o in self._each:
            o.phase(text)

    def warning(self, text: str) -> None:
        for o in self._each:
            o.warning(text)

    def training_started(self, epochs: int, steps_per_epoch: int, cpu: Callable[[], float | None]) -> None:
        for o in self._each:
            o.training_started(epochs, steps_per_epoch, cpu)

    def step(self, epoch: int, step: int, logs: Mapping[str, Any]) -> None:
        for o in self._each:
            o.step(epoch, step, logs)

    def epoch(self, epoch: int, row: Mapping[str, Any]) -> None:
        for o in self._each:
            o.epoch(epoch, row)

    def training_finished(self) -> None:
        for o in self._each:
            o.training_finished()

    def output(self, source: str, line: str) -> None:
        for o in self._each:
            o.output(source, line)
