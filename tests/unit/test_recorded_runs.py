"""Run sets committed with the JSON ``perfkit analyze`` gave of them, every number of which a later perfkit
must give again to a relative 1e-9: the on-disk format stays readable, and a change to how the analysis
computes must not move a figure. When a change is meant to move one, the expected file is regenerated and the
commit says why.

- tests/data/runs/recorded-2026-12-06.tgz: runs recorded by a real perfkit, main at 63f4ae9 (before run
  records were written as typed records): a single-mode tiny baseline (no trace) and a 2-worker tiny
  multi-worker run with its trace window.
- tests/data/runs/synthetic-4w-2026-12-07.tgz: ``benchmarks/synthetic.py``'s baseline and 4-worker run (150
  steps an epoch, 3 epochs, 4,000 CPU samples, a straggler, a trace table), its expected JSON made by main at
  c3d3dda, before the CPU figures moved from pandas to DuckDB queries (issue 53).
"""

from __future__ import annotations

import gzip
import json
import math
import tarfile
from pathlib import Path
from typing import Any

import pytest

from perfkit.cli import main

pytestmark = pytest.mark.tf  # the trace window's captures are parsed with TensorFlow's profiler schema

DATA = Path(__file__).resolve().parents[1] / "data" / "runs"
VOLATILE = {"generated", "version"}  # when and by which perfkit the analysis was made


def differences(want: Any, got: Any, where: str = "") -> list[str]:
    """Where ``got`` differs from ``want``: numbers beyond a relative 1e-9, anything else not equal."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}.{k}: missing" for k in want.keys() - got.keys()]
        out += [f"{where}.{k}: not expected" for k in got.keys() - want.keys()]
        return out + [d for k in want.keys() & got.keys() for d in differences(want[k], got[k], f"{where}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{where}: {len(got)} items, not {len(want)}"]
        return [d for i, (a, b) in enumerate(zip(want, got, strict=True)) for d in differences(a, b, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(want, numbers) and isinstance(got, numbers) and not isinstance(want, bool):
        return [] if math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12) else [f"{where}: {got!r}, not {want!r}"]
    return [] if want == got else [f"{where}: {got!r}, not {want!r}"]


def _analysed(results: Path, out: Path) -> dict[str, Any]:
    assert main(["analyze", "--results-dir", str(results), "--format", "json", "--output", str(out), "--no-html"]) == 0
    doc = json.loads(out.read_text())
    return {k: v for k, v in doc.items() if k not in VOLATILE}


@pytest.mark.parametrize(("name", "expected", "run_ids"), [
    ("recorded-2026-12-06", "recorded-2026-12-06.expected.json", {"fixture-single", "fixture-multi-2w"}),
    ("synthetic-4w-2026-12-07", "synthetic-4w-2026-12-07.expected.json.gz",
     {"20261130T000000Z-single-synthetic", "20261201T000000Z-multi-synthetic"})])
def test_committed_runs_analyse_to_the_committed_figures_first_and_from_the_cache(
        tmp_path: Path, name: str, expected: str, run_ids: set[str]) -> None:
    with tarfile.open(DATA / f"{name}.tgz") as tar:
        tar.extractall(tmp_path / "runs", filter="data")
    packed = (DATA / expected).read_bytes()
    want = json.loads(gzip.decompress(packed) if expected.endswith(".gz") else packed)
    first = _analysed(tmp_path / "runs", tmp_path / "first.json")
    assert not differences(want, first), differences(want, first)[:10]
    assert {r["run_id"] for r in first["runs"]} == run_ids
    again = _analysed(tmp_path / "runs", tmp_path / "again.json")  # the analysis cache's answer
    assert not differences(want, again), differences(want, again)[:10]


def test_a_difference_is_found_where_it_is() -> None:
    want = {"a": [1.0, {"b": "x"}], "c": 3}
    assert differences(want, {"a": [1.0 + 1e-12, {"b": "x"}], "c": 3}) == []
    assert differences(want, {"a": [1.001, {"b": "y"}], "c": 3}) == [".a[0]: 1.001, not 1.0", ".a[1].b: 'y', not 'x'"]
    assert differences(want, {"a": [1.0]}) == [".c: missing", ".a: 1 items, not 2"]
