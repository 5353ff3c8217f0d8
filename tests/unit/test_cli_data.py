"""``perfkit data generate|check`` through the real entry point, ``perfkit.cli.main``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perfkit.cli import main
from perfkit.workloads.botdetector.synth import generate


def test_generate_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tiny.parquet"
    assert main(["data", "generate", "--preset", "tiny", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert str(out) in printed and "2,560 players" in printed and "bot share" in printed
    assert len(pd.read_parquet(out)) == 2_560 * 7
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.parquet"]

    assert main(["data", "check", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2,560 players" in printed and "humans" in printed and "bots" in printed
    assert "online_minutes" in printed


def test_generate_default_path_under_results_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["data", "generate", "--players", "50", "--seed", "4", "--results-dir", str(tmp_path)])
    assert rc == 0
    expected = tmp_path / "datasets" / "synth-v1-50p-7d-seed4.parquet"
    assert expected.exists() and str(expected) in capsys.readouterr().out


def test_generate_csv_with_other_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "short.csv"
    assert main(["data", "generate", "--players", "20", "--sequence-length", "3", "--out", str(out)]) == 0
    assert main(["data", "check", str(out), "--sequence-length", "3"]) == 0
    capsys.readouterr()
    assert main(["data", "check", str(out)]) == 2
    assert "has 3 day(s), expected 7" in capsys.readouterr().err


def test_check_bad_file_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    generate(5, seed=1).drop(columns=["chat_messages"]).to_csv(bad, index=False)
    assert main(["data", "check", str(bad)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"perfkit: error: {bad}") and "chat_messages" in lines[0]
    assert "Traceback" not in captured.err + captured.out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["data", "generate", "--preset", "huge"], "--preset"),
        (["data", "generate", "--players", "1"], "--players"),
        (["data", "check", "missing.parquet"], "not found"),
        (["data", "check", "notes.txt"], ".parquet or .csv"),
        (["data", "generate", "--players", "10", "--out", "out.txt"], "--out"),
    ],
)
def test_usage_errors_exit_2(args: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(tmp_path / a) if a.endswith((".parquet", ".txt")) else a for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1
