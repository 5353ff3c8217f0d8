"""Checkpoint saves timed (trainer/worker/checkpoints.py): each outermost save's seconds reach the sink, a
save nested in another is not counted twice, a failing sink never breaks the save, and the status records
saves and seconds (status.json's ``checkpoints``). The clock is passed in, not slept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfkit.trainer.worker import checkpoints
from perfkit.trainer.worker.part import Status


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(checkpoints.time, "monotonic", fake)
    return fake


def _manager(clock: FakeClock) -> type:
    class Manager:
        def write(self, seconds: float) -> str:
            clock.now += seconds
            return "written"

        def save(self) -> str:  # saves through write, as tf.train.CheckpointManager does
            clock.now += 0.5
            return self.write(1.0)

    Manager.write = checkpoints.timed(Manager.write)
    Manager.save = checkpoints.timed(Manager.save)
    return Manager


def test_the_outermost_save_is_timed_once(clock: FakeClock) -> None:
    seen: list[float] = []
    checkpoints.set_sink(seen.append)
    m = _manager(clock)()
    assert m.save() == "written" and seen == [pytest.approx(1.5)]
    assert m.write(0.25) == "written" and seen == [pytest.approx(1.5), pytest.approx(0.25)]
    assert checkpoints.timed(type(m).save) is type(m).save, "timed once, however often installed"


def test_a_failing_sink_never_breaks_the_save(clock: FakeClock) -> None:
    def broken(_: float) -> None:
        raise RuntimeError("disk gone")

    checkpoints.set_sink(broken)
    assert _manager(clock)().save() == "written"


def test_the_status_records_saves_and_seconds(tmp_path: Path, clock: FakeClock) -> None:
    status = Status(tmp_path / "status.json", 0)  # registers itself as the sink
    assert json.loads((tmp_path / "status.json").read_text())["checkpoints"] == {"saves": 0, "s": 0.0}
    m = _manager(clock)()
    m.save()
    m.write(0.25)
    status.write(state="done")
    assert json.loads((tmp_path / "status.json").read_text())["checkpoints"] == {"saves": 2, "s": 1.75}
