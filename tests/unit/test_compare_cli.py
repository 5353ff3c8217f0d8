"""``perfkit compare``'s options reach both runs' configs (no training: train_once is replaced)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfkit.cli import main


class _Stop(Exception):
    pass


@pytest.fixture
def configs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    import perfkit.cli.compare as run_cli

    seen: list[Any] = []

    def fake_train_once(cfg: Any, opts: Any, results_dir: Path, run_id: Any, quiet: bool) -> Path:
        seen.append(cfg)
        if len(seen) == 2:
            raise _Stop
        return results_dir / "base"

    monkeypatch.setattr(run_cli, "train_once", fake_train_once)
    return seen


@pytest.mark.parametrize("flags,spec,retries", [([], "auto", 3), (["--no-profile"], "off", 3),
                                                (["--profile-retries", "5"], "auto", 5)])
def test_profiling_flags_reach_the_baseline_and_the_multi_worker_run(configs: list[Any], tmp_path: Path,
                                                                     flags: list[str], spec: str, retries: int) -> None:
    with pytest.raises(_Stop):
        main(["compare", "--preset", "tiny", "--results-dir", str(tmp_path), "--quiet", *flags])
    assert [c.mode.value for c in configs] == ["single", "multi"]
    assert all(c.profile_steps == spec and c.profile_retries == retries for c in configs)


def test_a_retry_count_out_of_range_is_a_one_line_error(configs: list[Any], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--preset", "tiny", "--results-dir", str(tmp_path), "--profile-retries", "11"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--profile-retries" in err[0] and not configs
