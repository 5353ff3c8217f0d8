"""How a worker's part ends when SIGINT keeps coming: the save it started is finished and said."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from perfkit.trainer.worker.part import Status, close_part


def test_a_sigint_during_the_last_save_does_not_lose_it(tmp_path: Path) -> None:
    # A killed launcher's workers get their parent-death SIGINT once per launcher thread that exits; the
    # second one used to land inside the save of the first and lose the epoch's steps.
    status = Status(tmp_path / "status.json", 0)
    saved = []

    def save() -> None:
        os.kill(os.getpid(), signal.SIGINT)  # delivered at once: the handler runs before kill() returns
        os.kill(os.getpid(), signal.SIGINT)
        saved.append(True)

    before = signal.getsignal(signal.SIGINT)
    assert close_part(status, save, KeyboardInterrupt()) == "interrupted"
    assert saved == [True]
    assert json.loads((tmp_path / "status.json").read_text())["state"] == "interrupted"
    assert signal.getsignal(signal.SIGINT) is before, "the handler it found is put back"
