"""Traces are parsed at analysis time and cached beside the run: reuse, invalidation, damaged captures,
read-only runs, runs made before the cache, and the trainer's side (it only records the captures)."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from perfkit.analysis import renderers, tracetables
from perfkit.analysis.analyze import analyze
from perfkit.analysis.renderers.json import to_dict
from perfkit.analysis.tracetables import load_traces
from perfkit.cli._shared import trace_lines
from perfkit.profiler import xplane
from perfkit.profiler.tracewindow import finish_traces
from perfkit.results import TRACE_CACHE_FILE, TRACE_STEPS_FILE, load_meta
from tests.unit._analysis_runs import set_meta, single_run, write_run

pytestmark = pytest.mark.tf  # captures are parsed with the profiler schema shipped in TensorFlow

DATA = Path(__file__).resolve().parents[1] / "data"
RUN = "20260101T010000Z-multi-real"
WINDOW = {"first": 11, "last": 12}


def _capture_file(w: int) -> str:
    return f"tensorboard/plugins/profile/{RUN}/h-w{w}.xplane.pb"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A 2-worker run as the trainer now leaves it: the captures of tests/data in place, nothing parsed.
    Its step callback has the traced steps (epoch 1, steps 2-3), so the trace covers every worker."""
    [path] = write_run(tmp_path, RUN, hosts=(("h", 2.0, 2),), busy={0: 0.2, 1: 0.2}, trace=False)
    for w in (0, 1):
        dest = path / _capture_file(w)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(gzip.decompress((DATA / f"tiny-2w-w{w}.xplane.pb.gz").read_bytes()))
    set_meta(path, profile={"spec": "11-12", "window": WINDOW, "workers": {
        str(w): {"status": "captured", "window": WINDOW, "file": _capture_file(w), "error": None, "attempt": 0}
        for w in (0, 1)}})
    return path


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Every file xplane.parse is called on."""
    calls: list[Path] = []
    real = xplane.parse

    def counting(path: str | Path) -> xplane.ParsedTrace:
        calls.append(Path(path))
        return real(path)

    monkeypatch.setattr(xplane, "parse", counting)
    yield calls


def _load(path: Path) -> tracetables.TraceTables:
    return load_traces(path, load_meta(path))


def test_the_second_load_reuses_the_cache(run: Path, parses: list[Path]) -> None:
    first = _load(run)
    assert first.source == "parsed" and len(parses) == 2
    cache = json.loads((run / TRACE_CACHE_FILE).read_text())
    assert cache["key"]["parser_version"] == xplane.PARSER_VERSION
    assert set(cache["key"]["inputs"]) == {"0", "1"} and cache["key"]["inputs"]["1"]["file"] == _capture_file(1)
    second = _load(run)
    assert second.source == "cache" and len(parses) == 2, "a cached run must not be parsed again"
    pd.testing.assert_frame_equal(first.steps, second.steps)
    pd.testing.assert_frame_equal(first.ops, second.ops)
    assert second.checks == first.checks and second.checks["0"]["steps"] == 2
    assert second.checks["0"]["matched_steps"] == 2  # the cross-check moved with the parsing
    assert set(first.steps.columns) >= {"collective_total_s", "overlap_s"} and not first.warnings


def test_a_new_parser_version_parses_again(run: Path, parses: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _load(run)
    monkeypatch.setattr(xplane, "PARSER_VERSION", xplane.PARSER_VERSION + 1)
    assert _load(run).source == "parsed" and len(parses) == 4
    assert json.loads((run / TRACE_CACHE_FILE).read_text())["key"]["parser_version"] == xplane.PARSER_VERSION
    assert _load(run).source == "cache" and len(parses) == 4


def test_a_changed_capture_or_table_parses_again(run: Path, parses: list[Path]) -> None:
    _load(run)
    capture = run / _capture_file(1)
    st = capture.stat()
    os.utime(capture, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert _load(run).source == "parsed" and len(parses) == 4
    pd.read_parquet(run / TRACE_STEPS_FILE).head(1).to_parquet(run / TRACE_STEPS_FILE)  # replaced by hand
    again = _load(run)
    assert again.source == "parsed" and len(parses) == 6 and len(again.steps) == 4


def test_a_damaged_capture_is_a_warning_naming_it_and_the_other_worker_loads(run: Path, tmp_path: Path) -> None:
    (run / _capture_file(1)).write_bytes(b"\xff" * 300)
    tables = _load(run)
    assert set(tables.steps["worker"]) == {0} and set(tables.unreadable) == {"1"}
    [warning] = tables.warnings
    assert str(run / _capture_file(1)) in warning and "corrupt or truncated" in warning
    single_run(tmp_path, "20260101T000000Z-single-base")
    a = analyze(None, tmp_path)
    row = a.runs.set_index("run_id").loc[RUN]
    assert row["split_source"] == "estimate"  # the trace figures need every worker
    assert "no usable trace of worker 1; 1 capture attempt failed: worker 1 unreadable (" in row["split_note"]
    assert any("h-w1.xplane.pb" in w and "left out" in w for w in a.warnings)


def test_why_no_trace_counts_every_failed_capture_attempt(run: Path, tmp_path: Path) -> None:
    meta = load_meta(run)
    entry = meta.profile["workers"]["1"]
    entry.update(status="crashed", file=None, error="TensorFlow's profiler crashed a worker (SIGSEGV); resumed",
                 attempts=[{"attempt": 0, "status": "captured", "error": None, "window": WINDOW},  # superseded
                           {"attempt": 1, "status": "failed", "error": "could not stop the profiler: boom",
                            "window": WINDOW}])
    set_meta(run, profile=meta.profile)
    single_run(tmp_path, "20260101T000000Z-single-base")
    note = analyze(None, tmp_path).runs.set_index("run_id").loc[RUN, "split_note"]
    assert note.endswith("(no usable trace of worker 1; 2 capture attempts failed: worker 1 failed (could not stop "
                         "the profiler: boom); worker 1 crashed (TensorFlow's profiler crashed a worker (SIGSEGV)))")


def test_a_run_that_cannot_be_written_still_analyses(run: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path, df: pd.DataFrame) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(tracetables, "write_parquet", refuse)
    tables = _load(run)
    assert tables.steps is not None and set(tables.steps["worker"]) == {0, 1}
    assert any("could not cache the parsed traces (Permission denied)" in n for n in tables.notes)
    assert not (run / TRACE_CACHE_FILE).exists() and not (run / TRACE_STEPS_FILE).exists()
    single_run(tmp_path, "20260101T000000Z-single-base")
    a = analyze(None, tmp_path)
    assert a.runs.set_index("run_id").loc[RUN, "split_source"] == "trace"
    assert any("could not cache" in w for w in a.warnings)


_LOAD_AND_REPORT = ("import json, sys; from pathlib import Path; from perfkit.analysis.tracetables import load_traces; "
                    "from perfkit.results import load_meta; p = Path(sys.argv[1]); t = load_traces(p, load_meta(p)); "
                    "print(json.dumps({'steps': t.steps is not None, 'notes': list(t.notes)}))")


def test_a_read_only_copy_still_analyses(run: Path) -> None:
    """Really read-only: as root (who writes through file modes) the run is bind-mounted read-only in a
    private mount namespace; otherwise its folders lose their write bits."""
    import shutil
    import subprocess
    import sys

    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.fail("running as root without util-linux's unshare: cannot make the run read-only")
        script = 'mount --bind -o ro "$1" "$1" && exec "$2" -c "$3" "$1"'
        cmd = ["unshare", "-m", "sh", "-c", script, "sh", str(run), sys.executable, _LOAD_AND_REPORT]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    else:
        modes = {p: p.stat().st_mode for p in [run, *run.rglob("*")] if p.is_dir()}
        try:
            for p in modes:
                p.chmod(stat.S_IREAD | stat.S_IEXEC)
            proc = subprocess.run([sys.executable, "-c", _LOAD_AND_REPORT, str(run)], capture_output=True,
                                  text=True, timeout=120)
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["steps"] and any("could not cache" in n for n in out["notes"]), out
    assert not (run / TRACE_CACHE_FILE).exists()


def test_an_old_run_with_tables_but_no_captures_uses_its_tables(tmp_path: Path, parses: list[Path]) -> None:
    [path] = write_run(tmp_path, RUN)  # trainer-written tables of the older kind; its capture files are gone
    tables = _load(path)
    assert tables.source == "tables" and not parses and not (path / TRACE_CACHE_FILE).exists()
    assert tables.steps["overlap_s"].isna().all() and tables.steps["collective_total_s"].isna().all()
    assert tables.checks["3"]["within_10pct"] is True  # the cross-check run.json kept
    single_run(tmp_path, "20260101T000000Z-single-base")
    a = analyze(None, tmp_path)
    w = a.workers[a.workers["run_id"] == RUN]
    assert a.runs.set_index("run_id").loc[RUN, "split_source"] == "trace" and w["overlap_share"].isna().all()


def test_an_old_run_with_its_captures_is_parsed_again(run: Path, parses: list[Path]) -> None:
    old = pd.DataFrame({"worker": [0, 1], "host": "h", "epoch": 1, "step": 2, "t_start_ns": 0, "step_s": 0.2,
                        "compute_s": 0.1, "collective_s": 0.05, "input_s": 0.0, "other_s": 0.05})
    old.to_parquet(run / TRACE_STEPS_FILE)  # parser version 1's columns, no trace_cache.json
    tables = _load(run)
    assert tables.source == "parsed" and len(parses) == 2 and len(tables.steps) == 4
    assert tables.steps["collective_total_s"].notna().all()
    assert "overlap_s" in pd.read_parquet(run / TRACE_STEPS_FILE).columns


def test_captures_that_cannot_be_parsed_fall_back_to_the_stored_tables(run: Path) -> None:
    for w in (0, 1):
        (run / _capture_file(w)).write_bytes(b"\x00broken")
    pd.DataFrame({"worker": [0, 1], "epoch": 1, "step": 2, "step_s": 0.2, "compute_s": 0.1, "collective_s": 0.05,
                  "input_s": 0.0, "other_s": 0.05}).to_parquet(run / TRACE_STEPS_FILE)
    tables = _load(run)
    assert tables.source == "tables" and set(tables.steps["worker"]) == {0, 1} and not tables.unreadable
    assert len(tables.notes) == 2 and all("as stored" in n for n in tables.notes)


def test_overlap_share_is_reported_per_worker(tmp_path: Path) -> None:
    # collective_s (exposed) = 0.65 - 0.2 - 0.05 = 0.4 for workers 0-2 and 0.1 for worker 3; 0.1 s hidden
    write_run(tmp_path, RUN, overlap=0.1)
    single_run(tmp_path, "20260101T000000Z-single-base")
    a = analyze(None, tmp_path)
    w = a.workers[a.workers["run_id"] == RUN].set_index("worker")
    assert w.loc[0, "overlap_share"] == pytest.approx(0.1 / 0.5) and w.loc[3, "overlap_share"] == pytest.approx(0.5)
    assert w.loc[0, "overlap_s"] == pytest.approx(0.1) and w.loc[0, "collective_total_s"] == pytest.approx(0.5)
    row = next(r for r in to_dict(a)["workers"] if r["run_id"] == RUN and r["worker"] == 3)
    assert row["overlap_share"] == pytest.approx(0.5)
    buf = io.StringIO()
    renderers.render("console", a, buf, renderers.RenderOptions(width=220))
    out = buf.getvalue()
    assert "overlap" in out and "20%" in out and "share of the collective time hidden under compute" in out


def test_end_of_run_lines_parse_the_captures_and_leave_the_cache(run: Path, parses: list[Path]) -> None:
    lines = trace_lines(load_meta(run).profile, run)
    assert lines[0].startswith("profiler trace of steps 11-12") and len(lines) == 3
    assert all("exposed" in line and "hidden under compute" in line for line in lines[1:])
    assert "trace vs step callback" in lines[1] and (run / TRACE_CACHE_FILE).is_file() and len(parses) == 2
    _load(run)
    assert len(parses) == 2  # the first analysis finds the cache the summary left


def test_end_of_run_lines_name_a_damaged_capture(run: Path) -> None:
    (run / _capture_file(0)).write_bytes(b"")
    lines = trace_lines(load_meta(run).profile, run)
    assert lines[1] == f"  worker 0: unreadable ({_capture_file(0)}: no host plane in the profiler capture)"
    assert "hidden under compute" in lines[2]


def test_the_trainer_only_records_the_captures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_parsing(path: Any) -> None:
        raise AssertionError("the trainer must not parse captures")

    monkeypatch.setattr(xplane, "parse", no_parsing)
    recorded: dict[str, Any] = {}
    fake_run = SimpleNamespace(path=tmp_path, update=lambda **fields: recorded.update(fields))
    attempts = [{"status": "crashed", "error": "TensorFlow's profiler crashed a worker", "window": WINDOW}]
    captures = {"0": {"status": "captured", "window": WINDOW, "file": _capture_file(0), "attempts": attempts}}
    finish_traces(fake_run, "11-12", captures)
    assert recorded["profile"] == {"spec": "11-12", "window": WINDOW, "workers": captures}
    assert recorded["profile"]["workers"]["0"]["attempts"] == attempts  # passed through untouched
    assert not list(tmp_path.iterdir())
    finish_traces(fake_run, "off", {})
    assert recorded["profile"] == {"spec": "off", "workers": {}}
