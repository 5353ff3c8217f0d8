"""`python -m benchmarks hosts`' arithmetic and table, from results given here (the bench itself needs root and
sshd)."""

from __future__ import annotations

from benchmarks import hosts
from benchmarks._common import Report, stats


def _report(extra: list[float], fetch: list[float], gone: list[float]) -> Report:
    r = Report("hosts", {"repeats": len(extra), "faults": len(gone)})
    r.results = {"startup_s": {"one machine, 2 workers": stats([5.0] * len(extra)),
                               "2 SSH hosts, 1 worker each": stats([5.0 + 2 * e for e in extra])},
                 "extra_per_host_s": stats(extra), "fetch_s": stats(fetch), "fetch_bytes": stats([2e6]),
                 "meets_target": {"extra per host": hosts._meets(stats(extra), hosts.GOAL_PER_HOST_S),
                                  "fetch": hosts._meets(stats(fetch), hosts.GOAL_FETCH_S)},
                 "faults": {"launcher killed": stats(gone), "link cut": stats([])}}
    return r


def test_the_goals_are_judged_on_the_medians_and_said_in_the_table() -> None:
    text = hosts.table(_report([0.2, 0.3, 1.9], [0.5, 0.6], [1.5, 2.5]))
    assert "extra per host: met; fetch: met" in text and "| 0.30 (0.20–1.90) |" in text
    assert "launcher killed: until no process is left | 2.0 (1.5–2.5) | 2 |" in text
    assert "link cut" not in text  # not measured: no row
    assert "extra per host: missed" in hosts.table(_report([1.2, 1.5], [3.0], []))
    assert hosts._meets(stats([]), 1.0) is None
