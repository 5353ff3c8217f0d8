"""The renderers: the verdict's sentences, JSON keys (documented, complete), CSV, HTML charts, terminal."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from perfkit.analysis import renderers
from perfkit.analysis.analyze import Analysis, analyze
from perfkit.analysis.renderers import json as report_json
from perfkit.analysis.renderers.gantt import timeline_figure
from perfkit.analysis.renderers.html import page as render_html
from tests.unit._analysis_runs import WALL0, S, set_meta, single_run, write_run

BASE, STRAG = "20260101T000000Z-single-base", "20260101T010000Z-multi-strag"
VERIFY = "20260101T030000Z-multi-verify"


@pytest.fixture
def pair(tmp_path: Path) -> Analysis:
    single_run(tmp_path, BASE, started="2026-01-01T00:00:00Z")
    [path] = write_run(tmp_path, STRAG, started="2026-01-01T01:00:00Z")
    pd.DataFrame({"worker": [0, 3], "host": ["a", "b"], "name": ["MatMul", "CollectiveReduceV2"], "count": [30, 30],
                  "total_s": [4.5, 3.0]}).to_parquet(path / "trace_ops.parquet")
    # each worker's start-up states (status.json's phases), its first step at WALL0
    phases = [{"state": "starting", "t_wall_ns": WALL0 - 8 * S, "cpu_s": 0.5},
              {"state": "training", "t_wall_ns": WALL0 - 2 * S, "cpu_s": 5.0}]
    workers = json.loads((path / "run.json").read_text())["workers"]
    set_meta(path, command_started_wall_ns=WALL0 - 10 * S,
             workers=[{**w, "started_wall_ns": WALL0 - 9 * S, "phases": phases} for w in workers])
    single_run(tmp_path, "20260101T020000Z-single-blog", preset="blog")
    # The equal-workers what-if, run: a=3, b=2.5 cores give every worker 0.2 s compute, 0.35 s steps.
    [check] = write_run(tmp_path, VERIFY, started="2026-01-01T03:00:00Z", busy={w: 0.2 for w in range(4)})
    set_meta(check, verifies={"run_id": STRAG, "what": "equal workers", "predicted_epoch_s": 3.9,
                              "predicted_lo_s": 3.9, "predicted_hi_s": 3.9, "budgets": "a=3, b=2.5",
                              "transfer_source": "run"})
    return analyze(None, tmp_path)


def test_verdict_states_speedup_straggler_what_if_cpu_and_convergence(pair: Analysis) -> None:
    text = "\n".join(pair.verdict)
    # The answer first: the newest run that is neither the baseline nor a verification run.
    assert pair.verdict[0] == ("4 workers are 1.53x faster than one machine; worker 3 on b (1 core) sets the pace, "
                               f"costing 35% of step time in waits; with equal workers 2.95x (run {STRAG}).")
    assert pair.verdict[1].startswith(f"Baseline: {BASE} (single, latest complete single-mode run")
    assert (f"{STRAG} (multi, 4 workers) is 1.53x faster than {BASE} (scaling efficiency 38%; steady epoch 7.5 s "
            "vs 11.5 s, fit 1.53x).") in text
    assert ("Worker 3 on b was the slowest in 100% of steps (speed score 0.40); the other workers spent 46% of "
            "each step waiting for it. Waiting cost 35% of all worker step time.") in text
    assert ("With equal workers (all at the median worker's speed) a steady epoch would take ~3.9 s, 95% interval "
            "3.9–3.9 s instead of 7.5 s (~2.95x the baseline); budgets that would realise it: a=3, b=1.") in text
    assert "Assumes" not in text and "equal workers: every worker" not in text  # in their own section
    assert pair.assumptions[0].startswith(
        f"{STRAG}, equal workers: every worker at the median worker's compute speed, keeping its own step-to-step "
        "variation (a step waits for the slowest: x1.000 at the median step); busy and input from traced steps")
    assert any(line.startswith(f"{STRAG}, placement: ") for line in pair.assumptions)
    assert not any(line.startswith(BASE) for line in pair.assumptions)
    # The verify run: 10 steps of 0.35 s + 1.0 s validation = 4.5 s measured against 3.9 s predicted.
    assert (f"Verified by running it ({VERIFY}, budgets a=3, b=2.5): equal workers predicted a steady epoch of 3.9 s, "
            "measured 4.5 s, error -13.3%: the prediction did not hold (|error| > 10%).") in text
    # 4 workers on a (capacity 3 / 0.2 s): 0.267 s compute + 0.15 s per step, validation 1.0 s x 0.267 / 0.5
    assert ("Placing workers 4:0 (a:b) by measured host speed instead of 3:1 (proportional shares 3.5:0.5) would cut "
            "the slowest worker's compute per step from ~0.50 s to ~0.27 s and a steady epoch to ~4.7 s (95% "
            "interval 4.7–4.7 s), if each host's measured throughput is shared by its workers") in text
    assert "b would get no worker." in text
    assert "CPU cost: 46.9 CPU-seconds per 1,000 samples vs 27 for the baseline (1.74x)" in text
    assert "Host CPU against its budget (mean): a 300% of 300% (100%), b 100% of 100% (100%)." in text
    assert "Validation after the last epoch: accuracy 0.9000 vs 0.9000 for the baseline (+0.0000)" in text
    assert pair.verdict[-1] == ("Left out 1 run(s): 20260101T020000Z-single-blog (preset blog, not the "
                                "baseline's quick).")
    assert "Estimated" not in text  # traces: nothing is an estimate


def test_verdict_labels_estimates_and_says_when_slower(tmp_path: Path) -> None:
    single_run(tmp_path, BASE, busy=0.1)
    write_run(tmp_path, STRAG, trace=False, cpu={0: 40.0, 1: 40.0, 2: 40.0, 3: 100.0})
    lines = analyze(None, tmp_path).verdict
    assert any(line.startswith(f"{STRAG} (multi, 4 workers) is 3.00x slower than {BASE}: speedup 0.33x")
               for line in lines)
    assert lines[0].startswith("4 workers are 3.00x slower than one machine (speedup 0.33x); ")
    assert lines[0].endswith(f" (step split estimated from CPU-seconds) (run {STRAG}).")
    straggler = next(line for line in lines[1:] if "slowest" in line)
    assert straggler.startswith("Estimated from CPU-seconds per step (no trace window): worker 3 on b")


def test_verdict_leaves_out_sentences_whose_figure_is_missing(tmp_path: Path) -> None:
    [path] = write_run(tmp_path, STRAG, hosts=(("a", 2.0, 2),), busy={0: 0.2, 1: 0.2})
    for w in (0, 1):  # no validation metrics recorded
        f = path / "workers" / str(w) / "epochs.parquet"
        pd.read_parquet(f).drop(columns=["val_accuracy", "val_auc", "val_loss"]).to_parquet(f)
    a = analyze(None, tmp_path)
    text = "\n".join(a.verdict)
    assert a.verdict[0].startswith("No baseline (no complete single-mode run")
    assert "faster" not in text and "slower" not in text and "Validation" not in text
    assert "Placing" not in text and "placement" not in text  # one host: no placement what-if
    assert "With equal workers" in text and "budgets that would realise it" not in text  # nor budgets per host
    assert "No worker is flagged as a straggler" in text
    assert "nan" not in text.lower()


def test_json_has_every_documented_key_and_no_undocumented_one(pair: Analysis) -> None:
    doc = json.loads(_rendered("json", pair))
    assert set(doc) == set(report_json.KEYS["top"])
    assert doc["format"] == "perfkit-analysis" and doc["baseline"]["run_id"] == BASE
    assert doc["verdict"] == list(pair.verdict)
    for section in report_json.TABLES:
        assert doc[section], f"{section} is empty in the fixture"
        for row in doc[section]:
            assert set(row) == set(report_json.KEYS[section]) or set(row) <= set(report_json.KEYS[section])
        documented_and_present = set().union(*(set(r) for r in doc[section]))
        assert documented_and_present == set(report_json.KEYS[section]), section
    strag = next(r for r in doc["runs"] if r["run_id"] == STRAG)
    assert strag["speedup"] == pytest.approx(11.5 / 7.5) and strag["flagged_workers"] == "3"
    base = next(r for r in doc["runs"] if r["run_id"] == BASE)
    assert base["straggler_cost"] is None  # missing is null, not a number
    assert doc["ops"][0] == {"run_id": STRAG, "name": "MatMul", "count": 30, "total_s": 4.5}
    assert "- `speedup`: baseline steady_epoch_s / steady_epoch_s" in report_json.keys_markdown()


def test_csv_is_the_per_run_table(pair: Analysis, tmp_path: Path) -> None:
    out = tmp_path / "out" / "runs.csv"
    renderers.write("csv", pair, out)
    df = pd.read_csv(out)
    assert df.columns.tolist() == list(report_json.KEYS["runs"])
    assert df["run_id"].tolist() == [BASE, STRAG, VERIFY]


def test_html_is_self_contained_with_the_verdict_first_and_every_chart(pair: Analysis, tmp_path: Path) -> None:
    out = tmp_path / "r" / "report.html"
    renderers.write("html", pair, out)
    page = out.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\bsrc=", page)  # plotly.js is inlined: no network needed
    assert len(page) > 1_000_000  # ... all of it
    titles = ["Speedup and scaling efficiency", f"Where the speedup went: {STRAG}", f"Where the speedup went: {VERIFY}",
              f"CPU% per process over time: {STRAG}",
              f"CPU% per process over time: {BASE}", f"CPU% per process over time: {VERIFY}",
              "Step time per worker", "Compute / transfer / wait per worker",
              f"Step timeline of the trace window: {STRAG}", f"Step timeline of the trace window: {VERIFY}",
              "Goodput: where the time of the whole command went, per worker",
              "Validation accuracy and AUC per epoch", "Memory per worker (peak RSS)"]
    positions = [page.index(f"<h2>{t}</h2>") for t in titles]
    assert page.index("<h2>Verdict</h2>") < min(positions)
    assert page.index("Verified by running it") < min(positions), "predicted vs measured, in the verdict"
    assert page.count("Plotly.newPlot") == len(titles)
    assert "end of epoch 3" in page and "ideal (speedup = workers)" in page
    assert '"type":"box"' in page and '"barmode":"stack"' in page
    assert "preset blog, not the baseline&#x27;s quick" in page  # the run left out, escaped
    # The timeline names the straggler's row in red and runs the equal-workers steps beside the workers'.
    fig = timeline_figure(pair, STRAG)
    assert fig is not None and '"equal workers (what-if)"' in page
    ticks = dict(zip(fig["layout"]["yaxis"]["tickvals"], fig["layout"]["yaxis"]["ticktext"]))
    assert ticks["worker 3 \u00b7 b"] == "<b style='color:#d62728'>worker 3 \u00b7 b \u00b7 straggler</b>"
    assert ticks["worker 0 \u00b7 a"] == "worker 0 \u00b7 a" and list(ticks)[-1] == "equal workers (what-if)"
    assert page.index("<h3>What-if assumptions</h3>") < min(positions)


def test_html_says_why_a_chart_is_missing(tmp_path: Path) -> None:
    write_run(tmp_path, STRAG)
    page = render_html(analyze(None, tmp_path))
    assert "No speedup: no baseline (no complete single-mode run" in page


def test_console_prints_verdict_and_tables(pair: Analysis) -> None:
    out = _rendered("console", pair, renderers.RenderOptions(width=200))
    assert out.startswith("Verdict")
    for title in ("runs: speed", "runs: cost and quality", f"workers of {STRAG}", f"where step time goes: {STRAG}",
                  "CPU per host", "placement what-if", "convergence", "top traced ops", "left out"):
        assert title in out, title
    assert "straggler" in out and "1.53x" in out


def test_a_clearly_slower_worker_that_sets_the_pace_is_named_even_above_the_flag(tmp_path: Path) -> None:
    write_run(tmp_path, STRAG, hosts=(("a", 3.0, 3), ("b", 1.0, 1)), busy={0: 0.2, 1: 0.2, 2: 0.2, 3: 0.24})
    text = "\n".join(analyze(None, tmp_path).verdict)
    assert "The straggler is worker 3 on b: the slowest in 100% of steps (speed score 0.83" in text, text


def test_the_json_keys_document_is_generated_from_the_keys() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "analysis-json.md").read_text(encoding="utf-8")
    assert doc.endswith(report_json.keys_markdown() + "\n"), "regenerate docs/analysis-json.md (see its header)"


def test_a_verification_that_ran_another_speed_is_moved_to_it_before_it_is_judged(tmp_path: Path) -> None:
    single_run(tmp_path, BASE, started="2026-01-01T00:00:00Z")
    write_run(tmp_path, STRAG, started="2026-01-01T01:00:00Z")
    [check] = write_run(tmp_path, VERIFY, started="2026-01-01T03:00:00Z", busy={w: 0.2 for w in range(4)})
    # The what-if assumed 0.25 s of compute per step; the verification's budgets gave 0.2 s.
    set_meta(check, verifies={"run_id": STRAG, "what": "equal workers", "predicted_epoch_s": 3.9,
                              "predicted_lo_s": 3.9, "predicted_hi_s": 3.9, "budgets": "a=3, b=2.5",
                              "transfer_source": "run", "compute_s": 0.25, "epoch_per_compute": 10.0})
    a = analyze(None, tmp_path)
    # 10 steps x 1 (no variation) + validation 1.0 s / the slowest worker's 0.5 s compute
    assert a.runs.set_index("run_id").loc[STRAG, "equal_epoch_per_compute"] == pytest.approx(12.0)
    v = a.verifications.iloc[0]
    assert v["compute_assumed_s"] == 0.25 and v["compute_measured_s"] == pytest.approx(0.2)
    assert v["predicted_at_realised_s"] == pytest.approx(3.4) and v["error_at_realised"] == pytest.approx(-1.1 / 4.5)
    assert ("error -13.3%: the prediction did not hold (|error| > 10%). Its workers computed 200 ms per step (median "
            "worker) against the 250 ms the what-if assumes (-20%): the budgets did not realise that speed. At the "
            "speed they did, the model predicts 3.4 s, error -24.4%.") in "\n".join(a.verdict)


def _rendered(fmt: str, a: Analysis, options: renderers.RenderOptions = renderers.RenderOptions()) -> str:
    buf = io.StringIO()
    renderers.render(fmt, a, buf, options)
    return buf.getvalue()


def test_the_console_says_where_a_workers_start_up_went(pair: Analysis) -> None:
    rows = pair.startup[pair.startup["run_id"] == STRAG]
    assert rows.groupby("worker")["phase"].apply(list).map(tuple).unique().tolist() == [
        ("launcher", "python", "starting", "training")]
    text = _rendered("console", pair)
    table = text[text.index("start-up: where a worker's went"):]
    cells = " ".join(c.strip() for line in table.splitlines() for c in line.split("│")[3:4])  # the phases column
    assert "launcher 1.0, python 1.0 (0.5), starting 6.0 (4.5), training 2.0" in " ".join(cells.split()), table


def test_the_advice_tables_columns_share_the_pages_width() -> None:
    from perfkit.analysis.renderers.html import _ADVICE_COLS, _ADVICE_WIDTHS

    assert set(_ADVICE_WIDTHS) == set(_ADVICE_COLS) and sum(_ADVICE_WIDTHS.values()) == 100


@pytest.mark.parametrize("width", [80, 100])
def test_the_terminal_advice_table_fits_and_hides_nothing(pair: Analysis, width: int) -> None:
    """A TensorFlow call with no space in it folds at its column's edge: the table neither widens past the
    terminal (where the end of each row was cut off) nor ends a cell with an ellipsis."""
    lines = _rendered("console", pair, renderers.RenderOptions(width=width)).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("advice: "))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
    table = [line.rstrip() for line in lines[start + 1:end + 1]]
    assert all(line[-1] in "┓┃┩│┘" for line in table), "\n".join(table)
    assert not any("…" in line for line in table)
    cells = "".join(line.split("│")[5].strip() for line in table if line.startswith("│"))
    assert "num_parallel_calls=tf.data.AUTOTUNE" in cells and "--steps-per-execution" in cells, cells
