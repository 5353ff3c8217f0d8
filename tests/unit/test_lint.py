"""The linter the project is configured for (pyproject.toml's [tool.ruff]) passes on the package and its
tests: ruff is one of the test extras, so a missing ruff fails here rather than passing unlinted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_ruff_finds_nothing() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "perfkit", "tests"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
