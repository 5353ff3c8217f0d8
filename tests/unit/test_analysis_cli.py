"""``perfkit analyze`` through the real entry point, ``perfkit.cli.main``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfkit.cli import main
from tests.unit._analysis_runs import single_run, write_run

BASE, STRAG = "20260101T000000Z-single-base", "20260101T010000Z-multi-strag"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    single_run(tmp_path, BASE, started="2026-01-01T00:00:00Z")
    write_run(tmp_path, STRAG, started="2026-01-01T01:00:00Z")
    return tmp_path


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err + captured.out, captured.err
    return lines[0]


def test_table_output_and_default_html_report(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Verdict") and f"{STRAG} (multi, 4 workers) is 1.53x faster" in out
    assert "runs: speed" in out and "where step time goes" in out
    [report] = list((results / "analysis").glob("*/report.html"))
    assert f"HTML report: {report}" in out
    assert "Plotly.newPlot" in report.read_text(encoding="utf-8")
    assert main(["runs", "--results-dir", str(results)]) == 0  # the report folder is not taken for a run
    assert "unreadable" not in capsys.readouterr().out


def test_named_runs_html_path_and_csv(results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html, csv = tmp_path / "out" / "r.html", tmp_path / "out" / "runs.csv"
    rc = main(["analyze", str(results / BASE), str(results / STRAG), "--html", str(html), "--csv", str(csv)])
    assert rc == 0 and html.is_file()
    assert pd.read_csv(csv)["run_id"].tolist() == [BASE, STRAG]
    assert f"CSV: {csv}" in capsys.readouterr().out


def test_json_to_stdout_and_to_a_file(results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--results-dir", str(results), "--format", "json", "--no-html"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["baseline"]["run_id"] == BASE and {r["run_id"] for r in doc["runs"]} == {BASE, STRAG}
    out = tmp_path / "a.json"
    assert main(["analyze", "--results-dir", str(results), "--format", "json", "--output", str(out), "--no-html"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and f"JSON: {out}" in captured.err
    assert json.loads(out.read_text())["verdict"] == doc["verdict"]
    assert not (results / "analysis").exists()


@pytest.mark.parametrize(("args", "words"), [
    (["--format", "xml"], ["--format", "'table'", "'json'"]),
    (["--output", "x.json"], ["perfkit: error: --output: only with --format json"]),
    (["--html", "r.html", "--no-html"], ["--html and --no-html"]),
    (["--baseline", "nope"], ["perfkit: error: --baseline: no run nope"]),
])
def test_bad_flags_exit_2_naming_the_flag(results: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                          words: list[str]) -> None:
    html = [] if "--html" in args else ["--no-html"]  # nothing written even if a check let one through
    assert main(["analyze", "--results-dir", str(results), *html, *args]) == 2
    captured = capsys.readouterr()
    assert all(w in captured.err for w in words), captured.err
    assert "Traceback" not in captured.err


def test_not_a_run_and_newer_schema_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "junk").mkdir()
    assert main(["analyze", str(tmp_path / "junk"), "--no-html"]) == 2
    assert _one_line_error(capsys) == f"perfkit: error: {tmp_path / 'junk'}: not a perfkit run (no run.json)"
    [path] = write_run(tmp_path, STRAG)
    meta = json.loads((path / "run.json").read_text())
    (path / "run.json").write_text(json.dumps({**meta, "schema_version": 7}))
    assert main(["analyze", str(path), "--no-html"]) == 2
    assert "is newer than this perfkit reads" in _one_line_error(capsys)
    assert main(["analyze", "--results-dir", str(tmp_path / "empty"), "--no-html"]) == 2
    assert "no perfkit runs in" in _one_line_error(capsys)


def test_analysis_imports_neither_tensorflow_nor_plotly_without_html(results: Path) -> None:
    code = ("import sys; from perfkit.cli import main; rc = main(['analyze', '--results-dir', sys.argv[1], "
            "'--no-html', '--format', 'json']); print(rc, 'tensorflow' in sys.modules, 'plotly' in sys.modules, "
            "file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, str(results)], capture_output=True, text=True, timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == "0 False False", proc.stderr


def test_the_commands_register_without_pandas_or_numpy() -> None:
    # every command (`perfkit --help`, the launcher of `perfkit run`) pays for what registration imports
    code = ("import sys; from perfkit.cli import _register; _register(); "
            "print(sorted(m for m in ('pandas', 'numpy', 'tensorflow', 'plotly') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_dash_h_is_help_everywhere_and_version_says_what_runs() -> None:
    def perfkit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "perfkit", *args], capture_output=True, text=True, timeout=120)

    top, run = perfkit("-h"), perfkit("run", "-h")
    assert top.returncode == 0 and "Usage: perfkit" in top.stdout and "analyze" in top.stdout, top.stderr
    assert run.returncode == 0 and "Usage: perfkit run" in run.stdout and "--preset" in run.stdout, run.stderr
    version = perfkit("--version")
    assert version.returncode == 0 and version.stdout.startswith("perfkit ") and "TensorFlow " in version.stdout


def test_an_unchanged_analysis_leaves_its_report_in_place(results: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import os

    html = tmp_path / "out" / "report.html"
    assert main(["analyze", "--results-dir", str(results), "--html", str(html)]) == 0
    os.utime(html, (1, 1))  # a time no write would leave
    assert main(["analyze", "--results-dir", str(results), "--html", str(html)]) == 0
    assert f"HTML report: {html} (unchanged: the same analysis)" in capsys.readouterr().out
    assert html.stat().st_mtime == 1
    # the default report: the newest one stands while the figures are the same; a new run writes a new one
    assert main(["analyze", "--results-dir", str(results)]) == 0
    [first] = list((results / "analysis").glob("*/report.html"))
    assert main(["analyze", "--results-dir", str(results)]) == 0
    assert f"HTML report: {first} (unchanged: the same analysis)" in capsys.readouterr().out
    assert list((results / "analysis").glob("*/report.html")) == [first]
    write_run(results, "20260101T020000Z-multi-other", started="2026-01-01T02:00:00Z", transfer=0.3)
    assert main(["analyze", "--results-dir", str(results), "--html", str(html)]) == 0
    assert "(unchanged" not in capsys.readouterr().out and html.stat().st_mtime > 1
