"""``perfkit export``: a run's timeline as a trace-event file, checked field by field against the records
(hand-built runs of ``_analysis_runs``, and the recorded captures of a tiny 2-worker run)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfkit.analysis.load import find_run
from perfkit.analysis.renderers import perfetto
from perfkit.analysis.traceevents import trace_events
from perfkit.cli import main
from perfkit.profiler import xplane
from perfkit.results import write_parquet
from tests.unit._analysis_runs import WALL0, S, set_meta, single_run, write_run
from tests.unit._trace_format import check_format, of, read_trace, worker_pids

DATA = Path(__file__).resolve().parents[1] / "data"
RID = "20260101T010000Z-multi"


def _export(results: Path, run: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[Path, str]:
    out = results / f"{run}.perfetto.json.gz"
    assert main(["export", run, "--results-dir", str(results), *args]) == 0
    return out, capsys.readouterr().out.strip()


def _steps(run_dir: Path, w: int) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "workers" / str(w) / "steps.parquet")


def test_every_step_epoch_and_cpu_sample_is_in_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [run] = write_run(tmp_path, RID)  # 4 workers on hosts a (3) and b (1); its captures are missing
    path, line = _export(tmp_path, RID, capsys)
    events = check_format(read_trace(path))
    pids = worker_pids(events)
    assert sorted(pids.values()) == [(0, "a"), (1, "a"), (2, "a"), (3, "b")]
    cpu = pd.read_parquet(run / "cpu.parquet")
    for pid, (w, _) in pids.items():
        steps, epochs = _steps(run, w), pd.read_parquet(run / "workers" / str(w) / "epochs.parquet")
        mine = of(events, "X", "step", pid)
        assert len(mine) == len(steps)
        assert sorted(e["dur"] for e in mine) == pytest.approx(sorted((steps["t_end_ns"] - steps["t_start_ns"]) / 1e3))
        assert len(of(events, "X", "epoch", pid)) == len(epochs) == len(of(events, "X", "validation", pid))
        assert [e["dur"] for e in of(events, "X", "validation", pid)] == pytest.approx(list(epochs["val_s"] * 1e6))
        counters = of(events, "C", pid=pid)
        samples = cpu[cpu["worker"] == w]
        assert len(counters) == 2 * len(samples)
        assert sorted(e["args"]["percent"] for e in counters if e["name"] == "CPU") == sorted(samples["cpu_percent"])
        assert sorted(e["args"]["bytes"] for e in counters if e["name"] == "RSS") == sorted(samples["rss_bytes"])
    launcher = {e["pid"] for e in events if e["ph"] == "M" and e["args"].get("name") == "launcher (local-machine)"}
    assert len(launcher) == 1 and len(of(events, "C", pid=launcher.pop())) == 2 * (cpu["worker"] == -1).sum()
    assert "4 workers, 120 steps, 12 epochs" in line and "no traced window" in line, line


def test_one_clock_origin_at_the_earliest_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path, RID, parts=True)  # each host's part on its own monotonic clock, 4000 s apart
    path, _ = _export(tmp_path, RID, capsys)
    doc = read_trace(path)
    events = check_format(doc)
    first_steps = {pid: min(e["ts"] for e in of(events, "X", "step", pid)) for pid in worker_pids(events)}
    assert set(first_steps.values()) == {0.0}, "every worker's first step at the wall-clock origin"
    assert doc["otherData"]["origin_wall_ns"] == WALL0 and doc["otherData"]["run_id"] == RID


def test_restarts_and_every_attempt_are_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [run] = write_run(tmp_path, RID, hosts=(("a", 2.0, 2),))
    for w in (0, 1):  # attempt 0 died in epoch 1 after 4 steps; attempt 1 redid epoch 1 later
        steps = _steps(run, w).assign(attempt=lambda d: (d["epoch"] >= 1).astype("int64"))
        lost = steps[steps["epoch"] == 1].head(4).assign(attempt=0, t_start_ns=lambda d: d["t_start_ns"] - 100 * S,
                                                        t_end_ns=lambda d: d["t_end_ns"] - 100 * S)
        write_parquet(run / "workers" / str(w) / "steps.parquet", pd.concat([steps, lost], ignore_index=True))
    set_meta(run, restarts=[{"attempt": 1, "after": "worker 1 died (SIGKILL)", "t_wall_ns": WALL0 + 50 * S,
                             "profiler_crash": False}])
    path, _ = _export(tmp_path, RID, capsys)
    events = check_format(read_trace(path))
    for pid, (w, _) in worker_pids(events).items():
        steps = of(events, "X", "step", pid)
        assert len(steps) == len(_steps(run, w)) == 34
        assert sorted({e["args"]["attempt"] for e in steps}) == [0, 1]
        [attempt] = of(events, "i", "restart", pid)
        assert attempt["name"] == "attempt 1" and attempt["s"] == "t"
    [restart] = [e for e in of(events, "i", "restart") if e["s"] == "g"]
    assert restart["name"] == "restart: attempt 1" and "SIGKILL" in restart["args"]["detail"]


def test_a_run_without_a_trace_exports_its_records_and_says_so(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = single_run(tmp_path, "20260101T000000Z-single")
    path, line = _export(tmp_path, run.name, capsys)
    doc = read_trace(path)
    events = check_format(doc)
    assert len(of(events, "X", "step")) == len(_steps(run, 0)) and not of(events, "X", "compute")
    assert doc["otherData"]["notes"] == ["no traced window"]
    assert line.startswith(f"wrote {path}: 1 workers") and "no traced window" in line


def test_overlapping_steps_go_on_lanes_that_nest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [run] = write_run(tmp_path, RID, hosts=(("a", 1.0, 1),))
    steps = _steps(run, 0)  # steps timed by another process (ParameterServerStrategy) can overlap
    longer = steps.assign(t_end_ns=steps["t_end_ns"] + (steps["t_end_ns"] - steps["t_start_ns"]) // 2)
    write_parquet(run / "workers/0/steps.parquet", longer)  # each step overlaps the next one
    path, _ = _export(tmp_path, RID, capsys)
    events = check_format(read_trace(path))  # nesting per thread holds
    assert len(of(events, "X", "step")) == len(steps) and len({e["tid"] for e in of(events, "X", "step")}) == 2
    assert "steps (overlapping, lane 2)" in {e["args"]["name"] for e in events if e["name"] == "thread_name"}


@pytest.mark.parametrize(("args", "says"), [
    (["nope"], f"RUN: 'nope' is neither a run directory nor a run id under {{r}}; runs there: {RID}"),
    ([RID, "--max-events", "-1"], "--max-events: -1 is negative"),
    ([RID, "-o", "x.json"], "--output: x.json does not end in .gz"),
    ([RID, "--workers", "1,9"], "--workers: 9 not in this run; its workers: 0, 1, 2, 3"),
    ([RID, "--workers", "one"], "--workers: 'one' is not a list of worker indices; this run's: 0, 1, 2, 3"),
])
def test_bad_input_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                         says: str) -> None:
    write_run(tmp_path, RID)
    assert main(["export", *args, "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"perfkit: error: {says.format(r=tmp_path)}") and "\n" not in err, err
    assert not list(tmp_path.glob("*.gz"))


def test_an_unknown_format_names_the_choice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path, RID)
    assert main(["export", RID, "--results-dir", str(tmp_path), "--format", "csv"]) == 2
    assert "'csv' is not one of 'perfetto'" in capsys.readouterr().err


# -- the traced window, from recorded captures ---------------------------------------------------------


def _traced_run(root: Path) -> list[Path]:
    """A 2-host run (one worker each, each part on its own clock) holding the tiny run's two captures, each
    worker's anchor set so that its recorded step (epoch 1, step 2) starts where its capture's marker does,
    and its step (1, 3) recorded where that marker is, as a real run records them."""
    parts = write_run(root, RID, hosts=(("a", 1.0, 1), ("b", 1.0, 1)), parts=True, steps=5)
    for w, part in enumerate(parts):
        rel = json.loads((part / "run.json").read_text())["profile"]["workers"][str(w)]["file"]
        (part / rel).parent.mkdir(parents=True, exist_ok=True)
        (part / rel).write_bytes(gzip.decompress((DATA / f"tiny-2w-w{w}.xplane.pb.gz").read_bytes()))
        ev = xplane.capture_events(part / rel).events
        marker = int(ev.loc[(ev["epoch"] == 1) & (ev["step"] == 2), "start_ns"].iloc[0])
        steps = _steps(part, w)
        mono = int(steps.loc[(steps["epoch"] == 1) & (steps["step"] == 2), "t_start_ns"].iloc[0])
        meta = json.loads((part / "run.json").read_text())
        set_meta(part, workers=[{**meta["workers"][0], "anchor_wall_ns": marker, "anchor_mono_ns": mono}])
        m3 = ev[(ev["epoch"] == 1) & (ev["step"] == 3)].iloc[0]
        at = (steps["epoch"] == 1) & (steps["step"] == 3)
        steps.loc[at, "t_start_ns"] = int(m3["start_ns"]) - marker + mono
        steps.loc[at, "t_end_ns"] = int(m3["end_ns"]) - marker + mono
        steps.loc[at, "duration_s"] = (int(m3["end_ns"]) - int(m3["start_ns"])) / 1e9
        steps.to_parquet(part / "workers" / str(w) / "steps.parquet")
    return parts


@pytest.mark.tf
def test_traced_ops_collectives_and_markers_line_up_with_the_steps(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    parts = _traced_run(tmp_path)
    path, line = _export(tmp_path, RID, capsys)
    events = check_format(read_trace(path))
    pids = worker_pids(events)
    assert sorted(pids.values()) == [(0, "a"), (1, "b")]
    for pid, (w, _) in pids.items():
        capture = xplane.capture_events(next(parts[w].rglob("*.xplane.pb")))
        traced = [e for e in events if e["pid"] == pid and e["ph"] == "X" and e["tid"] >= 100]
        assert len(traced) == len(capture.events), "every event of the capture, none capped"
        assert len(of(events, "X", "collective", pid)) == (capture.events["category"] == "collective").sum() > 0
        assert len(of(events, "X", "compute", pid)) > 100
        assert {"MatMul", "CollectiveReduceV2"} <= {e["args"].get("op_type") for e in traced}
        markers = {(e["args"]["epoch"], e["args"]["step"]): e for e in of(events, "X", "step_marker", pid)}
        steps = {(e["args"]["epoch"], e["args"]["step"]): e for e in of(events, "X", "step", pid)}
        assert sorted(markers) == [(1, 2), (1, 3)] and {markers[1, 2]["name"]} == {"train"}
        assert markers[1, 2]["ts"] == pytest.approx(steps[1, 2]["ts"], abs=0.002), "one clock, to the ns"
        names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["pid"] == pid and e["name"] == "thread_name"}
        assert {"steps", "epochs", "counters", "python3", "tf_Compute"} <= names
    assert "2 workers" in line and "collectives) of worker(s) 0, 1" in line


@pytest.mark.tf
def test_a_capture_whose_clock_is_off_is_placed_by_its_step_markers(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Measured on CI: a capture 22 ms away from its worker's anchored steps. The markers place it."""
    parts = _traced_run(tmp_path)
    meta = json.loads((parts[1] / "run.json").read_text())
    shifted = {**meta["workers"][0], "anchor_wall_ns": meta["workers"][0]["anchor_wall_ns"] + 22_000_000}
    set_meta(parts[1], workers=[shifted])
    path, line = _export(tmp_path, RID, capsys)
    _assert_markers_on_their_steps(path, abs_us=0.002)
    assert "worker 1: its capture's clock was +22.0 ms off its step records; placed by its 2 step markers" in line


def _assert_markers_on_their_steps(path: Path, abs_us: float) -> None:
    """Each worker's step (1, 2) marker starts where its recorded step does, within ``abs_us`` microseconds."""
    events = check_format(read_trace(path))
    for pid, (w, _) in worker_pids(events).items():
        markers = {(e["args"]["epoch"], e["args"]["step"]): e for e in of(events, "X", "step_marker", pid)}
        steps = {(e["args"]["epoch"], e["args"]["step"]): e for e in of(events, "X", "step", pid)}
        assert markers[1, 2]["ts"] == pytest.approx(steps[1, 2]["ts"], abs=abs_us), w


@pytest.mark.tf
def test_a_capture_without_a_wall_clock_start_is_placed_by_its_step_markers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TensorFlow 2.16 writes no profile_start_time: its events are relative to the capture's start."""
    parts = _traced_run(tmp_path)
    for part in parts:
        pb = next(part.rglob("*.xplane.pb"))
        space = xplane.read_xspace(pb)
        for plane in space.planes:
            names = {k: v.name for k, v in plane.stat_metadata.items()}
            kept = [st for st in plane.stats if names.get(st.metadata_id) != "profile_start_time"]
            del plane.stats[:]
            plane.stats.extend(kept)
        pb.write_bytes(space.SerializeToString())
        assert int(xplane.capture_events(pb).events["start_ns"].min()) < 10**18  # relative now
    path, line = _export(tmp_path, RID, capsys)
    _assert_markers_on_their_steps(path, abs_us=0.1)  # placed by the median over markers some us apart
    assert "worker 0: its capture records no wall-clock start (this TensorFlow writes none); placed by its 2 step " \
           "markers" in line


@pytest.mark.tf
def test_the_cap_drops_the_shortest_trace_events_and_says_so(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    _traced_run(tmp_path)
    full = trace_events(find_run(tmp_path, RID), max_events=0)
    capped = trace_events(find_run(tmp_path, RID), max_events=3000)
    assert len(capped.slices) + len(capped.instants) + len(capped.counters) == 3000
    kept_always = ("step", "epoch", "validation", "step_marker")
    for cat in kept_always:
        assert (capped.slices["cat"] == cat).sum() == (full.slices["cat"] == cat).sum()
    assert len(capped.counters) == len(full.counters)
    traced = capped.slices[~capped.slices["cat"].isin(kept_always)]
    assert capped.cap.dropped == len(full.slices) - len(capped.slices) > 0
    assert traced["dur_ns"].min() >= capped.cap.longest_dropped_ns
    path, line = _export(tmp_path, RID, capsys, "--max-events", "3000")
    doc = read_trace(path)
    assert len([e for e in check_format(doc) if e["ph"] != "M"]) == 3000
    cap = doc["otherData"]["cap"]
    assert cap["dropped"] == capped.cap.dropped and "shortest first" in cap["rule"]
    assert f"--max-events 3,000 dropped the {capped.cap.dropped:,} shortest" in line


def test_a_run_past_the_cap_keeps_whole_workers_steps_and_bins_the_counters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A long run of many workers in small: 4 workers x 30 steps, 12 epochs and 460 CPU samples under a cap of
    140 events: epochs and validation (24) always, the counters within 35 (each process's samples averaged into
    the same number of bins), then whole workers' steps while they fit."""
    [run] = write_run(tmp_path, RID)
    full, capped = (trace_events(find_run(tmp_path, RID), max_events=m) for m in (0, 140))
    assert len(capped.slices) + len(capped.instants) + len(capped.counters) <= 140
    assert len(capped.counters) <= 35 and capped.cap.counter_samples == len(pd.read_parquet(run / "cpu.parquet"))
    cpu_points = capped.counters[capped.counters["name"] == "CPU"]
    assert cpu_points.groupby("pid").size().nunique() == 1 and capped.cap.counter_bin_s > 0
    whole = capped.slices[capped.slices["cat"] == "step"].groupby("pid").size()
    every = full.slices[full.slices["cat"] == "step"].groupby("pid").size()
    assert (whole == every[whole.index]).all() and len(whole) == 2  # workers 0 and 1 whole, 2 and 3 left out
    assert capped.cap.steps_left_out == (2, 3) and capped.cap.steps_dropped == every[[3, 4]].sum()
    for cat in ("epoch", "validation"):
        assert (capped.slices["cat"] == cat).sum() == (full.slices["cat"] == cat).sum()
    assert any(n.startswith("steps of worker(s) 2, 3 left out (60 steps)") for n in capped.notes)
    assert any(n.startswith("CPU% and RSS: the 460 CPU samples averaged into bins of") for n in capped.notes)
    path, line = _export(tmp_path, RID, capsys, "--max-events", "140")
    assert "the steps of 2 worker(s) left out (60 steps; --workers exports fewer workers whole)" in line
    assert "CPU counters averaged into" in line and len(check_format(read_trace(path))) > 0


def test_workers_exports_only_those_workers_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [run] = write_run(tmp_path, RID)
    path, line = _export(tmp_path, RID, capsys, "--workers", "3")
    events = check_format(read_trace(path))
    assert sorted(worker_pids(events).values()) == [(3, "b")]
    [pid] = worker_pids(events)
    assert len(of(events, "X", "step", pid)) == len(of(events, "X", "step")) == len(_steps(run, 3))
    cpu = pd.read_parquet(run / "cpu.parquet")
    assert len(of(events, "C")) == 2 * cpu["worker"].isin([3, -1]).sum()  # its samples and the launcher's
    assert "1 workers, 30 steps, 3 epochs" in line, line


@pytest.mark.tf
def test_capture_events_keeps_what_parse_classifies(tmp_path: Path) -> None:
    path = tmp_path / "w0.xplane.pb"
    path.write_bytes(gzip.decompress((DATA / "tiny-2w-w0.xplane.pb.gz").read_bytes()))
    capture, parsed = xplane.capture_events(path), xplane.parse(path)
    ev = capture.events
    assert list(ev.columns) == list(xplane.EVENT_COLUMNS) and xplane.PARSER_VERSION >= 2
    assert (ev["end_ns"] >= ev["start_ns"]).all() and ev["line"].max() == len(capture.lines) - 1
    markers = ev[ev["epoch"] >= 0]
    assert (markers["name"] == "train").all()
    np.testing.assert_allclose(markers["start_ns"], parsed.steps["t_start_ns"], atol=512)  # parse's float ns
    assert (ev["category"] == "collective").sum() == 44
    assert set(ev["category"]) == {"", "compute", "collective", "input"}


def test_the_file_is_streamed_in_chunks_and_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_run(tmp_path, RID)
    events = trace_events(find_run(tmp_path, RID))
    monkeypatch.setattr(perfetto, "CHUNK_ROWS", 7)
    perfetto.write(events, tmp_path / "a.json.gz", {"k": 1})
    doc = read_trace(tmp_path / "a.json.gz")
    assert doc["otherData"] == {"k": 1} and len(check_format(doc)) == len(events.slices) + len(events.counters) + \
        len(events.instants) + 2 * len(events.tracks)

    def broken(*_: object) -> list[str]:
        raise RuntimeError("disk full")

    monkeypatch.setattr(perfetto, "_counters", broken)
    with pytest.raises(RuntimeError):
        perfetto.write(events, tmp_path / "a.json.gz", {"k": 2})
    assert read_trace(tmp_path / "a.json.gz")["otherData"] == {"k": 1}, "the old file stays whole"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["a.json.gz"], "no temporary file left"


def test_a_run_directory_path_and_output_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [run] = write_run(tmp_path / "elsewhere", RID)
    out = tmp_path / "x" / "t.json.gz"
    assert main(["export", str(run), "-o", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}:")
    check_format(read_trace(out))
