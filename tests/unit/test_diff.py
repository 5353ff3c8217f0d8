"""`perfkit diff` (analysis/diff.py, cli/diff.py) on hand-built runs whose change is known: a host whose
workers got faster is named with its ops, a run against its own copy is within noise, repeated runs give the
band from their spread, and --fail-if-slower gates on the slowdown beyond the noise."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from perfkit.analysis.diff import diff
from perfkit.analysis.load import load_runs
from perfkit.cli import main
from perfkit.results import write_parquet
from tests.unit._analysis_runs import write_run

SLOW = {0: 0.2, 1: 0.2, 2: 0.2, 3: 0.5}  # worker 3 on host b sets the pace: steps of 0.65 s
FASTER = {0: 0.2, 1: 0.2, 2: 0.2, 3: 0.3}  # ... until its host got faster: 0.45 s


def _run(root: Path, run_id: str, busy: dict[int, float], matmul_s: float = 3.0) -> Path:
    [path] = write_run(root, run_id, busy=busy)
    ops = pd.DataFrame({"worker": [0, 1, 2, 3], "host": ["a", "a", "a", "b"], "name": "MatMul",
                        "category": "compute", "count": 30, "total_s": [1.0, 1.0, 1.0, matmul_s]})
    write_parquet(path / "trace_ops.parquet", ops)
    return path


def _loaded(*paths: Path) -> list:
    return list(load_runs(list(paths), paths[0].parent).runs)


def test_a_host_that_got_faster_is_named_with_the_op_and_the_term_that_moved(tmp_path: Path) -> None:
    a = _run(tmp_path, "20260101T000000Z-multi", SLOW)
    b = _run(tmp_path, "20260101T000100Z-multi", FASTER, matmul_s=1.0)
    d = diff(_loaded(a), _loaded(b))
    assert d.slowdown == pytest.approx(0.45 / 0.65 - 1) and d.slowdown_hi < 0, "B is faster, beyond the noise"
    f = d.figures.set_index("figure")
    throughput = f.loc["steady_samples_per_s"]
    assert throughput["call"] == "beyond per-step noise" and throughput["change"] > 0, "one run a side"
    assert f.loc["wait_s", "change"] < 0 and f.loc["wait_s", "call"] == "no band", "one run a side: no band"
    top = d.ops.iloc[0]
    assert (top["worker"], top["op"]) == (3, "MatMul") and top["change_ms_per_1k"] < 0
    assert top["call"] == "beyond per-step noise"
    assert "per-step bootstrap" in d.band_note and not d.notes


def test_a_run_against_its_copy_is_within_noise_and_repeats_give_the_band(tmp_path: Path) -> None:
    a = _run(tmp_path, "20260101T000000Z-multi", SLOW)
    same = _run(tmp_path, "20260101T000100Z-multi", SLOW)
    d = diff(_loaded(a), _loaded(same))
    assert d.slowdown == pytest.approx(0.0, abs=1e-12) and d.slowdown_lo <= 0 <= d.slowdown_hi
    assert set(d.figures.loc[d.figures["figure"] == "steady_samples_per_s", "call"]) == {"within noise"}
    a2 = _run(tmp_path, "20260101T000200Z-multi", {**SLOW, 3: 0.52})
    b1 = _run(tmp_path, "20260101T000300Z-multi", FASTER)
    b2 = _run(tmp_path, "20260101T000400Z-multi", {**FASTER, 3: 0.31})
    d = diff(_loaded(a, a2), _loaded(b1, b2))
    assert "spread of 2 and 2 repeated runs" in d.band_note and d.slowdown_hi < 0
    assert set(d.figures.loc[d.figures["figure"] == "steady_samples_per_s", "call"]) == {"significant"}
    band = (0.67 - 0.65) / 0.66  # side A's relative range in time per sample, the larger of the two
    assert d.slowdown_hi - d.slowdown == pytest.approx(band)


def test_the_cli_gates_on_a_slowdown_beyond_the_noise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fast = _run(tmp_path, "20260101T000000Z-multi", FASTER)
    slow = _run(tmp_path, "20260101T000100Z-multi", SLOW)
    assert main(["diff", str(fast), str(slow), "--fail-if-slower", "50"]) == 0  # 44% slower: under 50%
    out = capsys.readouterr().out
    assert "B is 44.4% slower than A per sample" in out and "MatMul" in out
    assert main(["diff", str(fast), str(slow), "--fail-if-slower", "10"]) == 1
    err = capsys.readouterr().err
    assert "more than --fail-if-slower 10% beyond the noise" in err and "Traceback" not in err
    assert main(["diff", str(slow), str(fast), "--fail-if-slower", "0"]) == 0, "faster is no regression"
    capsys.readouterr()
    assert main(["diff", str(fast), str(slow), "--format", "json", "--output", str(tmp_path / "d.json"),
                 "--html", str(tmp_path / "d.html")]) == 0
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["format"] == "perfkit-diff" and doc["a"] == [fast.name] and doc["ops"][0]["op"] == "MatMul"
    assert "Where the speedup went" in (tmp_path / "d.html").read_text()


@pytest.mark.parametrize("args,message", [
    (["--fail-if-slower", "-1"], "--fail-if-slower: -1 is not a percentage >= 0"),
    (["--fail-if-slower", "x"], "--fail-if-slower"),
])
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                               message: str) -> None:
    a = _run(tmp_path, "20260101T000000Z-multi", SLOW)
    assert main(["diff", str(a), str(a), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert main(["diff", str(a), "nope", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "RUN: 'nope' is neither a run directory nor a run id" in err and len(err.splitlines()) == 1
