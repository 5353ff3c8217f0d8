"""The goodput ledger (analysis/goodput.py) on a hand-built run whose every bucket is known: the buckets add up
to the command's span for every worker, and the verdict, terminal and JSON carry it."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from perfkit.analysis.analyze import analyze
from perfkit.analysis.goodput import Bucket
from perfkit.analysis.renderers import console, html
from perfkit.analysis.renderers import json as report_json
from tests.unit._analysis_runs import WALL0, set_meta, single_run, write_run

S = 1_000_000_000


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / S, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture
def run(tmp_path: Path) -> Path:
    # 4 workers, every step 0.65 s of which 0.05 s input (traced), 10 steps and 1 s of validation an epoch, 3
    # epochs back to back from WALL0: 22.5 s of training; the command starts 5 s before and ends 2 s after.
    [path] = write_run(tmp_path, "20260101T000100Z-multi")
    set_meta(path, command_started_wall_ns=WALL0 - 5 * S, ended=_iso(WALL0 + int(24.5 * S)))
    return path


def test_every_workers_buckets_add_up_to_the_command_span(run: Path) -> None:
    a = analyze(None, run.parent)
    g = a.goodput
    assert len(g) == 4 and (g["run_id"] == run.name).all()
    for row in g.to_dict("records"):
        assert row["span_s"] == pytest.approx(29.5)
        assert sum(row[b.column] for b in Bucket if b is not Bucket.CHECKPOINT) == pytest.approx(row["span_s"])
        assert row["startup_s"] == pytest.approx(5.0) and row["end_s"] == pytest.approx(2.0)
        assert row["input_s"] == pytest.approx(30 * 0.05) and row["validation_s"] == pytest.approx(3.0)
        assert row["productive_s"] == pytest.approx(30 * 0.65 - 30 * 0.05)
        assert row["compile_s"] == pytest.approx(0.0) and row["between_epochs_s"] == pytest.approx(0.0, abs=1e-6)
        assert row["goodput"] == pytest.approx(18.0 / 29.5)
        assert row["checkpoint_s"] != row["checkpoint_s"], "a run recorded before saves were timed: null"
    assert a.runs["goodput"].iloc[0] == pytest.approx(18.0 / 29.5)


def test_a_slow_first_step_is_its_compile(tmp_path: Path) -> None:
    [path] = write_run(tmp_path, "20260101T000100Z-multi", trace=False)
    set_meta(path, command_started_wall_ns=WALL0 - 5 * S, ended=_iso(WALL0 + int(24.5 * S)))
    steps = path / "workers" / "0" / "steps.parquet"
    import pandas as pd

    df = pd.read_parquet(steps)
    df.loc[0, "duration_s"] = 2.65  # 2 s over its epoch's median step
    df.to_parquet(steps)
    g = analyze(None, tmp_path).goodput.set_index("worker")
    assert g.loc[0, "compile_s"] == pytest.approx(2.0) and g.loc[1, "compile_s"] == pytest.approx(0.0)
    assert g.loc[0, "input_s"] == 0.0, "no trace: input is not measured apart from the steps"


def test_a_run_without_the_commands_start_has_no_ledger(tmp_path: Path) -> None:
    write_run(tmp_path, "20260101T000100Z-multi")
    a = analyze(None, tmp_path)
    assert a.goodput.empty and a.runs["goodput"].isna().all()


def test_the_verdict_terminal_and_json_carry_it(run: Path) -> None:
    a = analyze(None, run.parent)
    [line] = [v for v in a.verdict if v.startswith("Goodput")]
    assert line.startswith("Goodput 61% (training steps over the whole command, every worker): of the command's "
                           "29.5 s,") and "start-up 5.0 s" in line and "were not timed" in line
    out = io.StringIO()
    console.render(a, out, console.RenderOptions(width=120))
    assert "goodput: where the whole command's time went" in out.getvalue()
    doc = io.StringIO()
    report_json.render(a, doc)
    rows = json.loads(doc.getvalue())["goodput"]
    assert len(rows) == 4 and set(rows[0]) == set(report_json.KEYS["goodput"]) and rows[0]["checkpoint_s"] is None
    page = html.page(a)
    assert "<h2>Goodput: where the time of the whole command went, per worker</h2>" in page
    assert '"barmode":"stack"' in page and '"name":"training steps"' in page


def test_the_whole_commands_waterfall_is_the_ledgers_buckets_against_the_baselines(run: Path) -> None:
    # the baseline: 3 epochs of 10 steps of 1.05 s and 1 s of validation (34.5 s) on 2 cores, its command
    # 3 s before and 1 s after: 38.5 s for the same 1,920 samples; the run: 29.5 s on 4 cores (ideal 2x)
    base = single_run(run.parent, "20260101T000000Z-single")
    set_meta(base, command_started_wall_ns=WALL0 - 3 * S, ended=_iso(WALL0 + int(35.5 * S)))
    a = analyze(None, run.parent, base.name)
    w = a.waterfall[(a.waterfall["run_id"] == run.name) & (a.waterfall["level"] == "command")]
    assert list(w["term"])[-1] == "not_explained" and abs(w["lost_s"].iloc[-1]) < 1e-9
    per_1k = 1000 / 1920
    assert w["lost_s"].sum() == pytest.approx((29.5 - 38.5 / 2) * per_1k)
    assert w["speedup_after"].iloc[-1] == pytest.approx(38.5 / 29.5)
    terms = w.set_index("term")
    assert terms.loc["startup", "lost_s"] == pytest.approx((5.0 - 3.0 / 2) * per_1k)
    [line] = [v for v in a.verdict if v.startswith("Over the whole command")]
    assert f"the speedup is {38.5 / 29.5:.2f}x of the 2.00x" in line


def test_checkpoint_saves_come_out_of_the_time_between_epochs_then_between_steps() -> None:
    from perfkit.analysis.goodput import _take_saves

    out = {Bucket.OTHER.column: 1.0, Bucket.BETWEEN.column: 0.5}
    _take_saves(out, 1.2)
    assert out == {Bucket.OTHER.column: 0.0, Bucket.BETWEEN.column: pytest.approx(0.3),
                   Bucket.CHECKPOINT.column: pytest.approx(1.2)}
    out = {Bucket.OTHER.column: 0.1, Bucket.BETWEEN.column: 0.0}
    _take_saves(out, 5.0)  # no more than there is: the buckets still add up to the span
    assert out[Bucket.CHECKPOINT.column] == pytest.approx(0.1) and out[Bucket.OTHER.column] == 0.0


def test_a_run_whose_workers_timed_no_save_has_zero_not_null(run: Path) -> None:
    meta = json.loads((run / "run.json").read_text())
    set_meta(run, workers=[{**w, "checkpoints": {"saves": 0, "s": 0.0}} for w in meta["workers"]])
    a = analyze(None, run.parent)
    assert (a.goodput["checkpoint_s"] == 0.0).all()
    [line] = [v for v in a.verdict if v.startswith("Goodput")]
    assert "not timed" not in line and line.endswith(".")


def test_the_captures_stop_in_a_validation_is_the_trace_windows_not_validations() -> None:
    """A window that ends its epoch is stopped as validation begins: that part of its cost comes out of the
    validation bucket, the rest out of the steps, and the buckets still add up to the span."""
    import pandas as pd

    from perfkit.analysis.goodput import _worker

    starts = [i * S // 2 for i in range(10)]
    steps = pd.DataFrame({"epoch": 0, "step": range(10), "duration_s": 0.5, "t_start_ns": starts,
                          "t_end_ns": [t + S // 2 for t in starts]})
    epochs = pd.DataFrame({"epoch": [0], "train_s": [5.0], "val_s": [2.0], "t_end_ns": [7 * S]})
    row = _worker(0, steps, epochs, 0, -S, 8 * S, 0.0, (1.0, 0.4), float("nan"))
    assert row[Bucket.TRACE.column] == pytest.approx(1.0) and row[Bucket.VALIDATION.column] == pytest.approx(1.6)
    assert row[Bucket.PRODUCTIVE.column] == pytest.approx(5.0 - 0.6)  # the first step is no slower: no compile
    assert sum(row[b.column] for b in Bucket if b is not Bucket.CHECKPOINT) == pytest.approx(row["span_s"]) == 9.0


def test_a_lost_attempt_and_a_restarts_first_step_are_the_restarts_not_productive() -> None:
    """Epoch 0, then an attempt lost 4 steps into epoch 1 and a restart: the lost steps and the restarted
    attempt's first step over its epoch's median are "between epochs, restarts", not training steps."""
    import pandas as pd

    from perfkit.analysis.goodput import _worker

    def run(epoch: int, attempt: int, t0: float, times: list[float]) -> pd.DataFrame:
        ends = t0 + pd.Series(times).cumsum()
        return pd.DataFrame({"worker": 0, "epoch": epoch, "attempt": attempt, "step": range(len(times)),
                             "duration_s": times,
                             "t_start_ns": ((ends - pd.Series(times)) * S).astype("int64"),
                             "t_end_ns": (ends * S).astype("int64")})

    steps = pd.concat([run(0, 0, 0.0, [0.5] * 10), run(1, 0, 6.0, [0.5] * 4), run(1, 1, 10.0, [2.5] + [0.5] * 9)])
    epochs = pd.DataFrame({"worker": 0, "epoch": [0, 1], "attempt": [0, 1], "train_s": [5.0, 7.0], "val_s": [1.0, 1.0],
                           "t_end_ns": [6 * S, 18 * S]})
    row = _worker(0, steps, epochs, 0, -S, 19 * S, 0.0, (0.0, 0.0), float("nan"))
    assert row[Bucket.PRODUCTIVE.column] == pytest.approx(10.0)
    assert row[Bucket.OTHER.column] == pytest.approx(6.0)  # the lost 2 s, the 2 s restart, the 2 s first step
    assert sum(row[b.column] for b in Bucket if b is not Bucket.CHECKPOINT) == pytest.approx(row["span_s"]) == 20.0
