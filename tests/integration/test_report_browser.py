"""The HTML report in a real browser: headless Chromium loads it from disk (no network), runs plotly.js and
dumps the resulting DOM; every chart must have drawn, the step timeline with its straggler row and the
equal-workers row. .ci/run installs Debian's chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfkit.analysis import renderers
from perfkit.analysis.analyze import analyze
from tests.integration._util import dump_dom
from tests.unit._analysis_runs import single_run, write_run

pytestmark = pytest.mark.integration



def test_every_chart_draws_and_the_timeline_shows_the_straggler(tmp_path: Path) -> None:
    single_run(tmp_path, "20260101T000000Z-single-base", started="2026-01-01T00:00:00Z")
    write_run(tmp_path, "20260101T010000Z-multi-strag", started="2026-01-01T01:00:00Z")
    analysis = analyze(None, tmp_path)
    out = tmp_path / "report.html"
    renderers.write("html", analysis, out)
    dom = dump_dom(out, tmp_path / "chromium-profile")
    charts = out.read_text(encoding="utf-8").count("Plotly.newPlot")
    drawn = re.findall(r'<div[^>]*class="[^"]*js-plotly-plot', dom)
    assert charts >= 7 and len(drawn) == charts, (charts, len(drawn))
    # plotly draws a tick label as SVG text: the straggler's row and the what-if row are on the page
    assert re.search(r"worker 3 · b · straggler", dom) and "equal workers (what-if)" in dom
    bars = re.findall(r'class="point"', dom)
    assert len(bars) >= 4 * 10 * 4, len(bars)  # 4 workers x 10 traced steps x 4 segments, at least
