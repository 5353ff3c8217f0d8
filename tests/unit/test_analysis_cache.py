"""The analysis cache (perfkit/analysis/runcache.py): a second analysis of the same runs reads their cached
figures and gives the same analysis, a changed input or a damaged cache is computed again, never trusted;
and the renderers that large runs made faster give what they gave before."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from perfkit import results
from perfkit.analysis import renderers, runcache
from perfkit.analysis.analyze import analyze
from perfkit.analysis.renderers import gantt
from perfkit.analysis.renderers.json import to_dict
from perfkit.analysis.result import Analysis
from perfkit.cli import main
from tests.unit._analysis_runs import set_meta, single_run, write_run

MULTI = "20260101T010000Z-multi-straggler"
TABLES = ("runs", "epochs", "workers", "processes", "hosts", "placement", "cpu_timeline", "ops", "step_timeline",
          "advice", "excluded", "verifications", "modes")


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A baseline, a 2-host run in two parts (merged on the wall clock) and a failed run (left out)."""
    single_run(tmp_path, "20260101T000000Z-single-base")
    write_run(tmp_path, MULTI, parts=True, overlap=0.1)
    write_run(tmp_path, "20260101T020000Z-multi-failed", status="failed")
    return tmp_path


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every run directory whose tables are read."""
    calls: list[Path] = []
    real = results.RunRecord.load.__func__

    def counting(cls: type[results.RunRecord], path: str | Path, samples: bool = True) -> results.RunRecord:
        calls.append(Path(path))
        return real(cls, path, samples)

    monkeypatch.setattr(results.RunRecord, "load", classmethod(counting))
    return calls


def _cached(root: Path) -> Analysis:
    with runcache.enabled():
        return analyze(None, root)


def _text(a: Analysis, fmt: str) -> str:
    buf = io.StringIO()
    renderers.render(fmt, a, buf, renderers.RenderOptions(width=160))
    if fmt != "json":
        return buf.getvalue()
    doc = json.loads(buf.getvalue())
    doc.pop("generated")
    return json.dumps(doc)


def assert_same(a: Analysis, b: Analysis) -> None:
    for fmt in ("json", "console", "csv"):
        assert _text(a, fmt) == _text(b, fmt), fmt
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True, obj=name)
    assert (a.verdict, a.assumptions, a.warnings) == (b.verdict, b.assumptions, b.warnings)


def test_a_second_analysis_reads_the_cache_and_gives_the_same_analysis(runs: Path, reads: list[Path]) -> None:
    plain = analyze(None, runs)
    assert not list(runs.rglob(runcache.CACHE_FILE)), "a library call computes every time and writes no cache"
    first = _cached(runs)
    assert {p.parent.name for p in runs.rglob(runcache.CACHE_FILE)} == {
        "20260101T000000Z-single-base", f"{MULTI}--a", "20260101T020000Z-multi-failed"}  # a run's first part
    reads.clear()
    second = _cached(runs)
    assert reads == [], "every run came from its cache"
    assert_same(plain, first)
    assert_same(plain, second)
    assert second.excluded["run_id"].tolist() == ["20260101T020000Z-multi-failed"]


def test_a_changed_input_is_analysed_again(runs: Path, reads: list[Path]) -> None:
    _cached(runs)
    part = runs / f"{MULTI}--b"
    cpu = pd.read_parquet(part / "cpu.parquet")
    results.write_parquet(part / "cpu.parquet", cpu.assign(cpu_percent=cpu["cpu_percent"] * 0.5))
    reads.clear()
    again = _cached(runs)
    assert {p.name for p in reads} == {f"{MULTI}--a", f"{MULTI}--b"}, "only the changed run is read again"
    assert_same(analyze(None, runs), again)
    steps = runs / f"{MULTI}--a" / "workers" / "0" / "steps.parquet"
    st = steps.stat()
    os.utime(steps, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # same bytes, newer file
    reads.clear()
    _cached(runs)
    assert len(reads) == 2


def test_a_damaged_or_stale_cache_is_never_trusted(runs: Path, reads: list[Path]) -> None:
    plain = analyze(None, runs)
    _cached(runs)
    home = runs / f"{MULTI}--a"
    (home / runcache.CACHE_DIR / "workers.parquet").write_bytes(b"not parquet")
    (runs / "20260101T000000Z-single-base" / runcache.CACHE_FILE).write_text("{truncated")
    reads.clear()
    assert_same(plain, _cached(runs))
    assert {p.name for p in reads} == {f"{MULTI}--a", f"{MULTI}--b", "20260101T000000Z-single-base"}
    record = json.loads((home / runcache.CACHE_FILE).read_text())
    record["tables"]["workers"]["dtypes"][0] = "float64"  # a column that would come back as another dtype
    (home / runcache.CACHE_FILE).write_text(json.dumps(record))
    reads.clear()
    assert_same(plain, _cached(runs))
    assert len(reads) == 2, "the run was computed again and its cache rewritten"
    reads.clear()
    _cached(runs)
    assert reads == []


def test_new_analysis_code_is_a_new_key(runs: Path, reads: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _cached(runs)
    monkeypatch.setattr(runcache, "_code_stamp", lambda: [["perfkit/analysis/summary.py", 1, 2]])
    reads.clear()
    _cached(runs)
    assert len(reads) == 4, "every run read again: the baseline, both parts, the failed run"


def test_a_running_or_unwritable_run_still_analyses_uncached(runs: Path, reads: list[Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    set_meta(runs / "20260101T000000Z-single-base", status="running")
    _cached(runs)
    assert not (runs / "20260101T000000Z-single-base" / runcache.CACHE_FILE).exists()

    def refuse(path: Path, write: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(runcache, "atomic_write", refuse)
    for p in runs.rglob(runcache.CACHE_FILE):
        p.unlink()
    plain = analyze(None, runs)
    assert_same(plain, _cached(runs))
    assert not list(runs.rglob(runcache.CACHE_FILE))


def test_perfkit_analyze_writes_the_cache_and_prints_the_same_twice(runs: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    outs = []
    for _ in range(2):
        assert main(["analyze", "--results-dir", str(runs), "--no-html"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and MULTI in outs[0]
    assert (runs / f"{MULTI}--a" / runcache.CACHE_FILE).is_file()


def test_the_json_renderer_writes_what_json_dumps_writes(runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "utc_now", lambda: "2026-12-03T00:00:00.000Z")
    a = analyze(None, runs)
    buf = io.StringIO()
    renderers.render("json", a, buf)
    assert buf.getvalue() == json.dumps(to_dict(a), indent=2, allow_nan=False) + "\n"
    assert len(a.step_timeline) and len(a.excluded)  # tables of numbers, strings, bools and nulls were in it


def test_the_step_timeline_chart_draws_the_first_steps_of_a_long_window(runs: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    a = analyze(None, runs)
    steps = a.step_timeline[(a.step_timeline["run_id"] == MULTI) & (a.step_timeline["worker"] >= 0)]
    total = len(steps[["epoch", "step"]].drop_duplicates())
    monkeypatch.setattr(gantt, "DRAWN_STEPS", 4)
    fig = gantt.timeline_figure(a, MULTI)
    assert fig is not None and total > 4
    assert len(fig["data"][0]["y"]) == 4 * (4 + 1), "4 steps of 4 workers and the what-if row"
    note = fig["layout"]["annotations"][0]["text"]
    assert note.startswith(f"{total} steps (the first 4 drawn; every one in --format json)")


def test_a_trace_window_longer_than_the_table_keeps_its_first_steps_and_says_how_many_it_has(
        runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfkit.analysis import timeline

    def window(a: Analysis) -> pd.DataFrame:
        t = a.step_timeline[(a.step_timeline["run_id"] == MULTI) & (a.step_timeline["worker"] >= 0)]
        return t.sort_values(["start_s", "worker"], ignore_index=True)

    whole = window(analyze(None, runs))
    monkeypatch.setattr(timeline, "TABLE_STEPS", 6)
    monkeypatch.setattr(gantt, "DRAWN_STEPS", 4)
    a = analyze(None, runs)
    run = a.runs.set_index("run_id").loc[MULTI]
    kept = window(a)
    first = whole[whole.set_index(["epoch", "step"]).index.isin(kept.set_index(["epoch", "step"]).index)]
    assert run["split_source"] == "trace" and int(run["steps_compared"]) > 6
    assert len(kept[["epoch", "step"]].drop_duplicates()) == 6 and len(kept) == 6 * 4
    pd.testing.assert_frame_equal(kept, first.reset_index(drop=True))  # the same rows as in the whole table
    assert list(kept["step"].unique()) == list(whole["step"].unique()[:6]), "the window's first steps"
    note = gantt.timeline_figure(a, MULTI)["layout"]["annotations"][0]["text"]  # type: ignore[index]
    assert note.startswith(f"{int(run['steps_compared'])} steps (the first 4 drawn; the first 6 in --format json)")
