"""Running a benchmark in its ``--smoke`` size through ``python -m benchmarks`` and checking what every benchmark
writes: exit 0, a Markdown table, its JSON with the machine and one repeat."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the source checkout: benchmarks/ is not installed with perfkit

MACHINE_KEYS = {"cpu_model", "logical_cores", "memory_bytes"}


def bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks ARGS`` from the checkout's root, as benchmarks/measurements runs them."""
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def smoke(name: str, tmp_path: Path, *extra: str, timeout: float = 420) -> dict[str, Any]:
    proc = bench(name, "--smoke", "--results-root", str(tmp_path), *extra, timeout=timeout)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "| ---" in proc.stdout, proc.stdout
    files = list((tmp_path / "bench").glob(f"{name}-*.json"))
    assert len(files) == 1, files
    data = json.loads(files[0].read_text())
    assert data["benchmark"] == name and data["ok"] is True and data["errors"] == []
    assert MACHINE_KEYS <= set(data["machine"]) and data["machine"]["logical_cores"] >= 1
    assert data["params"]["repeats"] == 1
    return data


def positive(stats: dict[str, Any]) -> float:
    assert stats["n"] >= 1 and stats["failed"] == 0, stats
    assert 0 < stats["min"] <= stats["median"] <= stats["max"], stats
    return float(stats["median"])
