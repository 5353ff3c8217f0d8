"""A TensorBoard server over chosen runs, on 127.0.0.1 unless asked otherwise.

TensorBoard's profile plugin reads one logdir and does not follow symlinks nor accept a multi-run
``--logdir_spec``, so a selection of runs is served from a private view directory holding hard links
(copies across filesystems) of each run's ``tensorboard/`` tree. Serving all of ``results/`` needs no view
and shows new runs as they land.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from perfkit._libc import set_parent_death_signal
from perfkit.errors import PerfkitError, UsageError

log = logging.getLogger(__name__)

START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class BoardSpec:
    logdir: Path
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"


def resolve_runs(names: list[str], results_dir: Path) -> list[Path]:
    """Run directories for ``names`` (paths, or run ids under ``results_dir``; a run id also brings the
    parts ``<run-id>--<host>`` that other hosts wrote)."""
    found: list[Path] = []
    for name in names:
        path = Path(name)
        if (path / "run.json").is_file():
            found.append(path)
            continue
        direct = results_dir / name
        parts = sorted(results_dir.glob(f"{name}--*")) if "/" not in name else []
        matches = [p for p in ([direct] if direct.is_dir() else []) + parts if (p / "run.json").is_file()]
        if not matches:
            raise UsageError(f"RUN: {name!r} is neither a run directory nor a run id under {results_dir}")
        found.extend(matches)
    return list(dict.fromkeys(p.resolve() for p in found))


def build_view(runs: list[Path]) -> Path:
    """A private logdir with each run's tensorboard/ tree linked in under the run directory's name."""
    view = Path(tempfile.mkdtemp(prefix="perfkit-tensorboard-"))
    for run in runs:
        source = run / "tensorboard"
        if not source.is_dir():
            log.warning("%s has no tensorboard/ directory (an older or unprofiled run)", run)
            continue
        for src in source.rglob("*"):
            if src.is_file() and not src.name.startswith("."):
                dest = view / run.name / "tensorboard" / src.relative_to(source)
                dest.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(src, dest)
                except OSError:  # another filesystem, or links not allowed
                    shutil.copy2(src, dest)
    return view


class Board:
    """One TensorBoard subprocess; ``start`` returns once it answers HTTP or fails naming why."""

    def __init__(self, spec: BoardSpec, view: Path | None = None) -> None:
        self.spec, self._view = spec, view
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(self.spec.logdir),
               "--host", self.spec.host, "--port", str(self.spec.port), "--load_fast", "false"]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                      preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PerfkitError(f"TensorBoard exited with code {self._proc.returncode}: {self._tail()}")
            if self._answers():
                return
            time.sleep(0.5)
        self.stop()
        raise PerfkitError(f"TensorBoard did not answer on {self.spec.url} within {timeout:.0f} s: {self._tail()}")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.spec.url + "data/logdir", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _tail(self) -> str:
        self._log.seek(0)
        lines = [ln for ln in self._log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        return lines[-1][:300] if lines else "no output"

    def wait(self) -> int:
        assert self._proc is not None
        return self._proc.wait()

    def stop(self, grace: float = 10.0) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                log.warning("TensorBoard (pid %d) ignored SIGTERM for %.0f s; killing it", self._proc.pid, grace)
                self._proc.kill()
                self._proc.wait(timeout=grace)
        self._log.close()
        if self._view is not None:
            shutil.rmtree(self._view, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child, before TensorBoard starts: the kernel sends it SIGTERM when perfkit dies, however it
    dies (even SIGKILL), so no TensorBoard is left serving the results folder. Where this is not Linux,
    the CLI's signal handlers still stop it on SIGTERM/SIGHUP."""
    set_parent_death_signal(signal.SIGTERM)
