"""The CPU samples loaded into DuckDB (analysis/cpustore.py): each sample's gap since its process's previous
one, taken while the samples stream in batch by batch, equals the one a sort of every sample gives, whatever
the batch size; a file whose process goes back in time is sorted instead."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfkit.analysis import cpustore
from perfkit.analysis.cpu import cpu_timeline, host_table, process_table
from perfkit.analysis.cpusamples import CpuSamples
from perfkit.analysis.load import find_run
from perfkit.results import write_parquet
from tests.unit._analysis_runs import write_run

RID = "20260101T010000Z-multi"


def _figures(tmp_path: Path, run_id: str = RID) -> dict[str, pd.DataFrame]:
    run = find_run(tmp_path, run_id)
    cpu = CpuSamples.of(run.record, files=run.cpu_files)
    ticks = pd.concat([cpu.ticks_of(w).assign(worker=w) for w in range(4)], ignore_index=True)
    return {"gaps": cpu.query("SELECT proc, t_ns, gap FROM samples ORDER BY proc, t_ns"), "ticks": ticks,
            "per_worker": cpu.per_worker, "processes": process_table(cpu, run.meta),
            "hosts": host_table(cpu, run.meta), "timeline": cpu_timeline(cpu)}


def _sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpustore, "_streamed", lambda con, batches, several: False)


@pytest.mark.parametrize("parts", [False, True])
@pytest.mark.parametrize("batch_rows", [7, 1 << 20])
def test_gaps_taken_as_the_samples_stream_in_are_those_a_sort_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: bool, batch_rows: int) -> None:
    write_run(tmp_path, RID, parts=parts, interval=0.3)
    monkeypatch.setattr(cpustore, "_BATCH_ROWS", batch_rows)
    streamed = _figures(tmp_path)
    assert streamed["gaps"]["gap"].isna().sum() == len(streamed["processes"])  # each process's first sample
    _sorted(monkeypatch)
    for name, want in _figures(tmp_path).items():
        pd.testing.assert_frame_equal(streamed[name], want, check_exact=False, rtol=1e-12, obj=name)


def test_a_process_that_goes_back_in_time_is_sorted_instead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [run] = write_run(tmp_path, RID)
    f = run / "cpu.parquet"
    cpu = pd.read_parquet(f)
    write_parquet(f, cpu.iloc[np.r_[len(cpu) // 2:len(cpu), 0:len(cpu) // 2]].reset_index(drop=True))
    calls: list[bool] = []
    real = cpustore._streamed
    monkeypatch.setattr(cpustore, "_streamed", lambda *a: calls.append(real(*a)) or calls[-1])
    shuffled = _figures(tmp_path)
    assert calls == [False] and (shuffled["gaps"]["gap"].dropna() > 0).all()
    write_parquet(f, cpu)
    _sorted(monkeypatch)
    for name, want in _figures(tmp_path).items():
        pd.testing.assert_frame_equal(shuffled[name], want, check_exact=False, rtol=1e-12, obj=name)
