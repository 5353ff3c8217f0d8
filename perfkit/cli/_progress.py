"""The live display of a run in the terminal: what ``perfkit run`` (and every command that trains) shows
while training, fed by the trainer's ``Observer`` events. Part of the CLI: the library
reports events and never prints (``perfkit.events``); this module is what a terminal makes of them."""

from __future__ import annotations

import logging
import math
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from perfkit.events import NullObserver


class WarningsOnly(NullObserver):
    """``--quiet``: no progress, but what the user must know (an exposed server, unenforced budgets)."""

    def warning(self, text: str) -> None:
        print(f"perfkit: warning: {text}", file=sys.stderr)

    def output(self, source: str, line: str) -> None:
        print(f"{source} {line}", file=sys.stderr)  # stdout is the run directory alone under --quiet


class ProgressObserver:
    """Epoch and step bars with live loss, accuracy and CPU%; it only reads what the trainer reports."""

    def __init__(self, console: Console, progress: type[Progress] = Progress) -> None:
        self.console = console
        self._progress = progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
            console=console,
            transient=False,
            # A redraw costs ~2 ms of the GIL on a 2-core machine: rich's default 10 a second took ~2% of a core
            # from training while a terminal showed it (`python -m benchmarks overhead`, hook cost); 2 keep it live.
            refresh_per_second=2,
        )
        self._cpu: Callable[[], float | None] = lambda: None
        self._epochs_task: Any = None
        self._steps_task: Any = None
        self._steps = 0

    def run_opened(self, path: Path) -> None:
        pass

    def phase(self, text: str) -> None:
        self.console.print(f"[dim]- {text}[/dim]")

    def warning(self, text: str) -> None:
        self.console.print(f"[yellow]warning: {escape(text)}[/yellow]")

    def output(self, source: str, line: str) -> None:
        self.console.print(f"[cyan]{escape(source)}[/cyan] {escape(line)}", highlight=False)

    def training_started(self, epochs: int, steps_per_epoch: int, cpu: Callable[[], float | None]) -> None:
        self._cpu, self._steps = cpu, steps_per_epoch
        self._progress.start()
        self._epochs_task = self._progress.add_task("epochs", total=epochs, info="")
        self._steps_task = self._progress.add_task("steps ", total=steps_per_epoch, info="")

    def step(self, epoch: int, step: int, logs: Mapping[str, Any]) -> None:
        from perfkit.analysis.renderers.console import fmt

        cpu = self._cpu()
        info = (f"loss {fmt(logs.get('loss'), '.4f')}  acc {fmt(logs.get('accuracy'), '.4f')}"
                f"  CPU {fmt(cpu, '.0f', '%')}")
        self._progress.update(self._steps_task, completed=step + 1, info=info)

    def epoch(self, epoch: int, row: Mapping[str, Any]) -> None:
        from perfkit.analysis.renderers.console import fmt

        info = (f"epoch {epoch + 1}: {fmt(row.get('train_s', math.nan) + row.get('val_s', 0.0), '.1f', ' s')}"
                f"  val_acc {fmt(row.get('val_accuracy'), '.4f')}  val_auc {fmt(row.get('val_auc'), '.4f')}")
        self._progress.update(self._epochs_task, advance=1, info=info)
        self._progress.reset(self._steps_task, total=self._steps, info="")

    def training_finished(self) -> None:
        if self._steps_task is not None:
            self._progress.update(self._steps_task, visible=False)
        self.close()

    @property
    def refresh_per_second(self) -> float:
        """How often the display redraws itself from its own thread."""
        return float(self._progress.live.refresh_per_second)

    def redraw(self) -> None:
        """One redraw, as its refresh thread makes them (``python -m benchmarks overhead`` times it)."""
        self._progress.refresh()

    def close(self) -> None:
        self._progress.stop()


class _WithView(Progress):
    """The bars, then whatever ``view`` holds (redrawn with them)."""

    view: RenderableType | None = None

    def get_renderables(self) -> Iterable[RenderableType]:
        yield from super().get_renderables()
        if self.view is not None:
            yield self.view


class LiveObserver(ProgressObserver):
    """``--live``: the bars with the workers' live view under them (``perfkit watch``'s), read once a second
    by a thread from the run this command opened. Only read: a failure to read it hides the view, never the
    run."""

    def __init__(self, console: Console, interval: float = 1.0) -> None:
        super().__init__(console, _WithView)
        self._interval = interval
        self._run: Path | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_opened(self, path: Path) -> None:
        """The view follows ``path`` from now on: its workers starting and connecting too, and a run on SSH
        hosts (whose launcher has no bars: its live copy, trainer/remote/mirror.py)."""
        self._run = Path(path)
        self._begin()

    def training_started(self, epochs: int, steps_per_epoch: int, cpu: Callable[[], float | None]) -> None:
        super().training_started(epochs, steps_per_epoch, cpu)
        self._begin()

    def _begin(self) -> None:
        if self._thread is not None:
            return
        self._progress.start()
        self._stop.clear()
        self._thread = threading.Thread(target=self._follow, name="perfkit-live-view", daemon=True)
        self._thread.start()

    def training_finished(self) -> None:
        self._halt()
        super().training_finished()

    def close(self) -> None:
        self._halt()
        super().close()

    def _halt(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self._interval)
            self._thread = None

    def _follow(self) -> None:
        from perfkit.live import render
        from perfkit.live.watcher import Watcher

        watcher, followed = None, None
        while not self._stop.wait(self._interval):
            try:
                if self._run is None:
                    continue
                if self._run != followed:  # a command that runs several runs (a restart opens none)
                    watcher, followed = Watcher(self._run), self._run
                snap = watcher.poll()
                self._progress.view = render.view(snap, hint=False) if snap.workers else None  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - the view never breaks the command
                logging.getLogger(__name__).debug("live view: could not read the run", exc_info=True)
