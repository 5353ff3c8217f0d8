"""The whole study end to end: `perfkit compare --verify` trains a tiny single baseline, a 4-worker run on an
emulated unequal pair of hosts and the what-ifs' verification runs, then analyses them; `perfkit analyze`
over the same results agrees and writes JSON."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests import clusters
from tests.integration._util import meta, require_every_trace
from tests.integration._util import perfkit as _perfkit

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One `perfkit compare --verify` on an emulated unequal pair serves every test of this module: the
    baseline, the multi run, the verification runs, the verdict and the report (one study, not two)."""
    tmp_path = tmp_path_factory.mktemp("compare")
    # 7:1, not a milder pair: the verification's equal budget is the median worker's speed, so the known
    # change the diff test reads grows with the gap; at 3:1 a noisy fast worker left it at 7% (CI, stop 63)
    cluster = clusters.write(tmp_path / "pair.toml", clusters.pair((7, 1), ("fast", "slow")))
    results = tmp_path / "results"
    proc = _perfkit("compare", "--preset", "tiny", "--epochs", "2", "--cluster", str(cluster), "--verify",
                    "--results-dir", str(results), "--quiet", timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return results, proc


def test_compare_runs_both_strategies_and_ends_with_the_verdict_and_report(verified: tuple[Path, Any]) -> None:
    results, proc = verified
    runs = sorted(p for p in results.iterdir() if (p / "run.json").is_file())[:2]
    assert [meta(r)["mode"] for r in runs] == ["single", "multi"]
    assert all(meta(r)["status"] == "complete" for r in runs)
    # The multi run's "command to first step" counts from its own launch, not from the compare's start.
    single_ended = datetime.fromisoformat(meta(runs[0])["ended"].replace("Z", "+00:00")).timestamp()
    assert meta(runs[1])["command_started_wall_ns"] / 1e9 >= single_ended - 0.01
    out = proc.stdout
    assert "Verdict" in out and f"{runs[1].name} (multi, 2 workers) is" in out and "speedup" in out
    assert out.split("Verdict", 1)[1].lstrip().startswith("- 2 workers are "), "the answer first"
    m = re.search(r"HTML report: (\S+)", out)
    assert m and out.rstrip().endswith(m.group(1)), out[-500:]
    html = Path(m.group(1)).read_text()
    assert "plotly" in html.lower() and runs[0].name in html and "Step timeline of the trace window" in html

    analysed = _perfkit("analyze", *map(str, runs), "--baseline", runs[0].name, "--format", "json", "--no-html")
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    doc = json.loads(analysed.stdout)
    by_id = {r["run_id"]: r for r in doc["runs"]}
    assert doc["baseline"]["run_id"] == runs[0].name and set(by_id) == {r.name for r in runs}
    multi = by_id[runs[1].name]
    assert multi["speedup"] > 0 and multi["workers"] == 2
    started = datetime.fromisoformat(meta(runs[1])["started"].replace("Z", "+00:00")).timestamp()
    first_step_after = multi["startup_s"] - (started - meta(runs[1])["command_started_wall_ns"] / 1e9)
    assert 0 < multi["startup_s"] and first_step_after > 0, (multi["startup_s"], first_step_after)
    require_every_trace(runs[1])  # TF's profiler crash is retried by the run; see _util
    assert multi["split_source"] == "trace", multi["split_source"]
    assert doc["advice"] and all(a["run_id"] == runs[1].name for a in doc["advice"])
    _waterfall_holds(doc, multi, by_id[runs[0].name])


def _waterfall_holds(doc: dict[str, Any], multi: dict[str, Any], base: dict[str, Any]) -> None:
    """From the ideal (the pair's budgets add up to the machine the baseline had: 1x) to the measured speedup,
    the terms sum to the gap exactly, and "not explained" is at most 10% of it (issue 54's goal), here beside
    the rest of the suite: a term lost or counted twice (a traced step's spike was once both the window's and
    the split's) shows as more."""
    rows = [r for r in doc["waterfall"] if r["run_id"] == multi["run_id"] and r["level"] == "steady"]
    assert rows and rows[-1]["term"] == "not_explained", rows
    assert multi["ideal_speedup"] == pytest.approx(base["wf_cores"] and multi["wf_cores"] / base["wf_cores"])
    gap_s = (multi["steady_epoch_s"] / multi["steady_epoch_samples"]
             - base["steady_epoch_s"] / base["steady_epoch_samples"] / multi["ideal_speedup"]) * 1000
    assert sum(r["lost_s"] for r in rows) == pytest.approx(gap_s, rel=1e-9)
    assert rows[-1]["speedup_after"] == pytest.approx(multi["speedup"], rel=1e-9)
    terms = {r["term"]: round(r["share"], 3) for r in rows}
    assert abs(rows[-1]["share"]) <= 0.10, f"not explained is {rows[-1]['share']:.1%} of the lost time: {terms}"
    whole = [r for r in doc["waterfall"] if r["run_id"] == multi["run_id"] and r["level"] == "command"]
    assert whole and abs(whole[-1]["lost_s"]) < 1e-6, whole[-1]  # the ledger's buckets add up to the span


def test_diff_names_what_a_budget_change_moved_and_gates_ci_on_it(verified: tuple[Path, Any]) -> None:
    """The verification run is the multi run with the slow host's worker given the median worker's budget: a
    known change. `perfkit diff MULTI VERIFY` finds B faster beyond the noise, the wait for the slowest
    shrunk, and the fast worker's all-reduce among the ops that moved; `--fail-if-slower` fails the reverse."""
    results, _ = verified
    runs = sorted(p for p in results.iterdir() if (p / "run.json").is_file())
    multi, verify = runs[1], runs[2]
    proc = _perfkit("diff", str(multi), str(verify), "--format", "json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    figures = {f["figure"]: f for f in doc["figures"]}
    assert doc["slowdown_hi"] < 0, (doc["slowdown"], doc["slowdown_lo"], doc["slowdown_hi"],
                                    meta(verify)["verifies"]["budgets"], figures)
    throughput = figures["steady_samples_per_s"]
    assert throughput["call"] == "beyond per-step noise" and throughput["change"] > 0, throughput
    assert figures["wait_s"]["change"] < 0, figures["wait_s"]
    # Equal workers end the fast host's wait for the slow one: its all-reduce (where that wait is spent) is
    # among the ops that moved, faster. (Per-op compute times of one trace window a side are too noisy to
    # name a direction on this loaded 2-core machine: the slow worker's MatMul was seen both ways.)
    moved = [(o["worker"], o["op"], o["change_ms_per_1k"], o["call"]) for o in doc["ops"]]
    assert any(w == 0 and op.startswith("Collective") and change < 0 and call == "beyond per-step noise"
               for w, op, change, call in moved), moved
    # The reverse diff: B slower beyond the noise. The gate's threshold is set from the band it measured (how
    # much faster the verification run is varies from run to run): below the band's low end it fails, above
    # it passes; the band is seeded, so the same pair gives the same band.
    reverse = json.loads(_perfkit("diff", str(verify), str(multi), "--format", "json").stdout)
    assert reverse["slowdown_lo"] > 0, (reverse["slowdown"], reverse["slowdown_lo"], reverse["band"])
    under, over = f"{reverse['slowdown_lo'] * 50:.3f}", f"{reverse['slowdown_lo'] * 100 + 1:.3f}"
    gate = _perfkit("diff", str(verify), str(multi), "--fail-if-slower", under)
    assert gate.returncode == 1, (under, gate.stdout[-1500:], gate.stderr[-1500:])
    assert f"more than --fail-if-slower {float(under):g}% beyond the noise" in gate.stderr, gate.stderr[-1500:]
    assert "Traceback" not in gate.stderr
    assert _perfkit("diff", str(verify), str(multi), "--fail-if-slower", over).returncode == 0
    assert _perfkit("diff", str(multi), str(verify), "--fail-if-slower", "0").returncode == 0


def test_compare_verify_runs_the_what_if_and_reports_predicted_against_measured(verified: tuple[Path, Any]) -> None:
    results, proc = verified
    runs = sorted(p for p in results.iterdir() if (p / "run.json").is_file())
    assert [meta(r)["mode"] for r in runs[:3]] == ["single", "multi", "multi"] and runs[2].name.endswith("-verify")
    verifies = meta(runs[2])["verifies"]
    assert verifies["run_id"] == runs[1].name and verifies["predicted_epoch_s"] > 0
    # The verification ran at the budgets the what-if named (equal workers: one budget per worker here).
    applied = meta(runs[2])["cluster"]["cpu_budget"]["applied"]["host_budgets_cores"]
    from perfkit.analysis.whatif import parse_budgets

    assert applied == pytest.approx(parse_budgets(verifies["budgets"]), rel=0.02)
    # ... and traced the end of its first epoch, which its steady figures leave out
    from perfkit.analysis.verify import verification_window_of

    asked = (meta(runs[2]).get("profile") or {}).get("spec")
    expected = verification_window_of(runs[1])
    assert expected != "off" and asked == expected, (asked, expected)
    out = " ".join(proc.stdout.split())  # the terminal renderer wraps lines
    assert "Verified by running it" in out and "predicted a steady epoch of" in out and "error" in out, out[-3000:]

    analysed = _perfkit("analyze", *map(str, runs), "--format", "json", "--no-html")
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    doc = json.loads(analysed.stdout)
    moved = next(r for r in doc["runs"] if r["run_id"] == runs[1].name)["placement_epoch_s"] is not None
    assert len(runs) == (4 if moved else 3), "a placement that moves a worker is run, one that does not is not"
    if not moved:
        assert "Not verified: --verify: the placement what-if" in out and "nothing to run" in out
    rows = doc["verifications"]
    assert [r["what"] for r in rows] == ["equal workers", "placement"][:len(runs) - 2]
    for row, check in zip(rows, runs[2:]):
        assert row["run_id"] == runs[1].name and row["verified_by"] == check.name
        assert row["predicted_epoch_s"] == meta(check)["verifies"]["predicted_epoch_s"] and row["measured_epoch_s"] > 0
        assert row["error"] == pytest.approx((row["predicted_epoch_s"] - row["measured_epoch_s"])
                                             / row["measured_epoch_s"])
        assert row["held"] is (abs(row["error"]) <= 0.10)
    if moved:  # the placement ran at the run's budgets with the proposed workers per host
        placed = meta(runs[3])["cluster"]
        assert runs[3].name.endswith("-verify-placement") and rows[1]["placement"].startswith(
            next(r for r in doc["runs"] if r["run_id"] == runs[1].name)["placement_proposed"])
        hosts = (placed["declared"] or placed)["hosts"]  # one host alone keeps its address: nothing declared apart
        counts, names = rows[1]["placement"].split(" ")  # e.g. "2:0 (fast:slow)"
        proposed = {n: int(k) for n, k in zip(names.strip("()").split(":"), counts.split(":"))}
        assert {h["name"]: h["workers"] for h in hosts} == {n: k for n, k in proposed.items() if k}
