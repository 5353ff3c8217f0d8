"""`perfkit sweep` end to end on the smallest scale model: one and two emulated hosts of half a core, tiny
runs cut as the benchmarks' --smoke cuts them; the curve in the terminal, the JSON and the HTML report, and
each point an ordinary run directory."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks._common import SMOKE_PLAYERS
from tests.integration._util import dump_dom, meta, perfkit

pytestmark = pytest.mark.integration


def test_a_sweep_ends_with_the_curve_in_the_terminal_json_and_html(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = perfkit("sweep", "--workers", "1,2", "--cores-per-worker", "0.5", "--preset", "tiny", "--train-players",
                   str(SMOKE_PLAYERS[0]), "--test-players", str(SMOKE_PLAYERS[1]), "--results-dir", str(results),
                   "--forecast", "2", "--quiet", timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Scaling curve" in proc.stdout and "1 worker " in proc.stdout and "2 workers" in proc.stdout
    [sweep_dir] = results.glob("sweep-*")
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert record["status"] == "complete" and [r["workers"] for r in record["runs"]] == [1, 2, 1, 2]
    # a strong scale model probes one worker at each count's share of the batch, the forecast's too
    assert [(r["role"], r["status"]) for r in record["runs"][2:]] == [("probe", "complete")] * 2
    for r in record["runs"]:
        assert meta(results / r["run_id"])["status"] == "complete"  # an ordinary run: perfkit analyze reads it
    again = perfkit("sweep", "--analyze-only", str(sweep_dir), "--format", "json", "--no-html")
    assert again.returncode == 0, again.stderr[-2000:]
    doc = json.loads(again.stdout)
    points = {p["workers"]: p for p in doc["points"]}
    assert points[1]["speedup"] == pytest.approx(1.0)  # one run: the reference against itself
    assert points[2]["speedup"] > 0 and points[2]["efficiency"] == pytest.approx(points[2]["speedup"] / 2)
    assert points[2]["transfer_s"] is not None and points[2]["compute_s"] > 0
    assert f"{points[2]['speedup']:.2f}x" in proc.stdout
    assert [f["workers"] for f in doc["forecast"]] == [1, 2, 4, 8] and doc["model"]
    probed = {m["formula"]: m["value"] for m in doc["model"]}
    assert all(probed[f"P({n})"] > 0 for n in (1, 2)) and probed["e"] >= 0 and "P(4)" not in probed
    # two counts: nothing left out to test the model on, so no forecast claims an interval, and each says why
    assert all(not f["supported"] and f["epoch_lo_s"] is None and "fewer than three counts" in f["support_note"]
               for f in doc["forecast"][:2])
    # ... and a count with no probe says that first: its compute would be the line no count tested
    assert all("no probe ran" in f["support_note"] for f in doc["forecast"][2:])
    assert "not supported, no interval" in proc.stdout
    page = (sweep_dir / "report.html").read_text()
    assert page.count('class="plotly-graph-div"') == 5 and "ideal (speedup = N)" in page
    assert f"{points[2]['speedup']:.4g}" in page
    # ... and drawn by a real browser: every chart, with its ideal line and the forecast's points as SVG
    dom = dump_dom(sweep_dir / "report.html", tmp_path / "chromium-profile")
    drawn = re.findall(r'<div[^>]*class="[^"]*js-plotly-plot', dom)
    assert len(drawn) == page.count('class="plotly-graph-div"') == 5, len(drawn)
    assert "ideal (speedup = N)" in dom and re.search(r'class="legendtext"[^>]*>ideal', dom), "a legend drawn"
    assert "Outside what the measured points support" in dom
    assert re.search(r'class="legendtext"[^>]*>forecast beyond what the points support', dom)
