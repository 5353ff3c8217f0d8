"""The HTML report in a real browser: headless Chromium loads it from disk (no network), runs plotly.js and
dumps the resulting DOM; every chart must have drawn, the step timeline with its straggler row and the
equal-workers row. .ci/run installs Debian's chromium."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from perfkit.analysis import renderers
from perfkit.analysis.analyze import analyze
from tests.integration._util import BROWSER, dump_dom
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


# Run by the page once plotly has drawn: every table's and chart's right edge, and the page's scroll width.
_MEASURE = """<script>window.addEventListener('load', () => setTimeout(() => {
  const w = document.documentElement.clientWidth;
  const boxes = [...document.querySelectorAll('table, .js-plotly-plot')].map(
      e => [e.tagName + (e.previousElementSibling ? ': ' + e.previousElementSibling.textContent : ''),
            Math.ceil(e.getBoundingClientRect().right)]);
  const out = document.createElement('pre'); out.id = 'measured';
  out.textContent = JSON.stringify({width: w, scroll: document.documentElement.scrollWidth, boxes: boxes});
  document.body.appendChild(out);
}, 1000));</script>"""
WINDOW = (1280, 1000)


def test_every_table_and_chart_fits_a_1280_px_window(tmp_path: Path) -> None:
    """Issue 52: the advice table's TensorFlow column ran off the page. Measured in the browser on a report
    with advice (the straggler run's), its long cells wrapped or folded; a screenshot is kept beside."""
    single_run(tmp_path, "20260101T000000Z-single-base", started="2026-01-01T00:00:00Z")
    write_run(tmp_path, "20260101T010000Z-multi-strag", started="2026-01-01T01:00:00Z")
    analysis = analyze(None, tmp_path)
    assert not analysis.advice.empty, "the page under test must hold the advice table"
    out = tmp_path / "report.html"
    renderers.write("html", analysis, out)
    measured = tmp_path / "measured.html"
    measured.write_text(out.read_text(encoding="utf-8").replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    assert BROWSER is not None, "no Chromium: apt-get install chromium (.ci/run installs it)"
    proc = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'p'}",
                           f"--window-size={WINDOW[0]},{WINDOW[1]}", "--virtual-time-budget=15000", "--dump-dom",
                           measured.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r'<pre id="measured">(.*?)</pre>', proc.stdout, re.S)
    assert found, "the page never measured itself"
    m = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert m["width"] <= WINDOW[0] and len(m["boxes"]) >= 8, m
    wide = [b for b in m["boxes"] if b[1] > m["width"]]
    assert not wide and m["scroll"] <= m["width"], f"beyond the {m['width']} px window: {wide} (scroll {m['scroll']})"
