"""Running a benchmark in its ``--smoke`` size through ``perfkit bench`` and checking what every benchmark
writes: exit 0, a Markdown table, its JSON with the machine and one repeat."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.integration._util import perfkit

MACHINE_KEYS = {"cpu_model", "logical_cores", "memory_bytes"}


def smoke(name: str, tmp_path: Path, *extra: str, timeout: float = 420) -> dict[str, Any]:
    proc = perfkit("bench", name, "--smoke", "--results-root", str(tmp_path), *extra, timeout=timeout)
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
