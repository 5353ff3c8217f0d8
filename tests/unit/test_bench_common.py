"""The benchmarks' shared repeat loop: every arm once a round, the order turned each round."""

from __future__ import annotations

from benchmarks._common import interleave, ratios


def _recording(calls: list[tuple[str, int]]) -> dict[str, object]:
    def arm(name: str):  # type: ignore[no-untyped-def]
        def measure(i: int) -> float:
            calls.append((name, i))
            return float(len(calls))
        return measure
    return {name: arm(name) for name in "abc"}


def test_each_round_starts_one_arm_later_so_a_drift_within_a_round_moves_between_arms() -> None:
    calls: list[tuple[str, int]] = []
    got = interleave(_recording(calls), 4)  # type: ignore[arg-type]
    assert [n for n, _ in calls] == list("abc" "bca" "cab" "abc")
    assert [i for _, i in calls] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    # results stay per arm in round order, so paired ratios still pair one round's measurements
    assert got == {"a": [1.0, 6.0, 8.0, 10.0], "b": [2.0, 4.0, 9.0, 11.0], "c": [3.0, 5.0, 7.0, 12.0]}
    assert ratios(got["b"], got["a"])["values"] == [2.0, 4.0 / 6.0, 9.0 / 8.0, 11.0 / 10.0]


def test_arms_that_read_what_an_earlier_arm_left_keep_their_order() -> None:
    calls: list[tuple[str, int]] = []
    interleave(_recording(calls), 2, rotate=False)  # type: ignore[arg-type]
    assert [n for n, _ in calls] == list("abcabc")
