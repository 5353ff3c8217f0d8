"""`perfkit tensorboard` flag errors: one line, exit 2, nothing started."""

from __future__ import annotations

from pathlib import Path

from perfkit.cli import main


def test_tensorboard_bad_host_or_port_is_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["tensorboard", "--results-dir", str(tmp_path), "--host", "nosuch.invalid"]) == 2
    assert main(["tensorboard", "--results-dir", str(tmp_path), "--port", "70000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("perfkit: error: --host: cannot listen on 'nosuch.invalid'")
    assert err[1] == "perfkit: error: --port: 70000 is not between 0 and 65535"
