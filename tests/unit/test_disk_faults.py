"""A results disk that fills or turns read-only during a run: nothing half-written, one line naming the path."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from pathlib import Path
from typing import BinaryIO

import pytest

from perfkit._atomic import atomic_write, disk_refuses, is_disk_error, read_object, write_error
from perfkit.results import RESERVE_BYTES, RESERVE_FILE, RunDir
from perfkit.runmeta import RunMeta
from perfkit.trainer.worker.part import Status, close_part


def _fills_up(fh: BinaryIO) -> None:
    fh.write(b"x" * 4096)  # part of the file made it to disk before the disk filled
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_write_that_fills_the_disk_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "steps.parquet"
    target.write_bytes(b"old")
    with pytest.raises(OSError) as caught:
        atomic_write(target, _fills_up)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target), "names the file, not its temp"
    assert write_error(caught.value) == f"could not write {target}: no space left on device"
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["steps.parquet"]


def test_a_file_another_process_replaces_reads_as_an_object_or_nothing(tmp_path: Path) -> None:
    """What the watcher, the launcher, the janitor and the SSH agent read while a worker writes: a status file
    absent, half-written by a writer that did not rename, or not an object is {} (read again next poll)."""
    status = tmp_path / "status.json"
    assert read_object(status) == {}
    atomic_write(status, lambda fh: fh.write(json.dumps({"state": "training", "epoch": 2}).encode()))
    assert read_object(status) == {"state": "training", "epoch": 2}
    status.write_text('{"state": "trai')
    assert read_object(status) == {}
    status.write_text("[1, 2]")
    assert read_object(status) == {}
    assert read_object(tmp_path) == {}  # a directory where the file should be


def test_a_read_only_disk_is_named_so() -> None:
    exc = OSError(errno.EROFS, "Read-only file system", "/r/run.json")
    assert is_disk_error(exc) and write_error(exc) == "could not write /r/run.json: read-only file system"
    assert not is_disk_error(ValueError("x")) and not is_disk_error(OSError(errno.ENOENT, "gone"))


def test_a_worker_whose_tables_cannot_be_saved_ends_failed_naming_the_file(tmp_path: Path) -> None:
    status = Status(tmp_path / "status.json", 0)
    table = tmp_path / "steps.parquet"

    def save() -> None:
        atomic_write(table, _fills_up)

    for exc in (None, KeyboardInterrupt()):  # the last save on a clean end or on Ctrl-C
        assert close_part(status, save, exc) == "failed"
        said = json.loads((tmp_path / "status.json").read_text())
        assert said["state"] == "failed" and said["error"] == f"could not write {table}: no space left on device"
    # The epoch's save failed inside fit: the same words, not the exception's repr.
    with pytest.raises(OSError) as caught:
        save()
    assert close_part(status, save, caught.value) == "failed"
    error = json.loads((tmp_path / "status.json").read_text())["error"]
    assert error == f"could not write {table}: no space left on device"
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_a_live_run_holds_space_for_its_last_record_until_it_finishes(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r1", RunMeta.new("r1", mode="multi"))
    assert (run.path / RESERVE_FILE).stat().st_size == RESERVE_BYTES
    run.finish("failed", "could not write x: no space left on device")
    assert not (run.path / RESERVE_FILE).exists()
    assert json.loads((run.path / "run.json").read_text())["status"] == "failed"


def test_a_results_dir_that_cannot_be_written_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfkit.errors import ResultsError

    def refuse(path: Path, obj: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("perfkit.results.write_json", refuse)
    with pytest.raises(ResultsError, match=r"^--results-dir: could not write .*r2/run\.json: no space left on device$"):
        RunDir.create(tmp_path, "r2", RunMeta.new("r2", mode="multi"))


def test_the_disk_says_when_it_takes_no_more(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.statvfs(tmp_path)
    assert disk_refuses(tmp_path, below=1) is None
    assert disk_refuses(tmp_path, below=real.f_bavail * real.f_frsize + (1 << 30)) == "no space left on device"
    ro = os.statvfs_result((*real[:8], real.f_flag | os.ST_RDONLY, real[9]))
    monkeypatch.setattr(os, "statvfs", lambda p: ro)
    assert disk_refuses(tmp_path, below=1) == "read-only file system"


def test_a_capture_written_as_the_disk_filled_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfkit.profiler import tracewindow as tw

    target = tw.CaptureTarget(tmp_path, "s", "h0-w0")

    def stop() -> None:  # TF wrote its capture, maybe cut short by the full disk
        out = target.private_dir / "plugins" / "profile" / "t1"
        out.mkdir(parents=True)
        (out / "host.xplane.pb").write_bytes(b"\x0a\x01")

    monkeypatch.setattr(tw, "disk_refuses", lambda path: "no space left on device")
    capture = tw.TraceCapture(tw.Window(2, 3), target, start=lambda d: None, stop=stop)
    capture.step_begin(2)
    capture.finish()
    assert capture.result["status"] == "failed" and "no space left on device" in capture.result["error"]
    assert not target.final_path.exists() and not target.private_dir.exists()


def test_an_atomic_write_onto_a_device_or_fifo_writes_through_it_and_leaves_it_in_place(tmp_path: Path) -> None:
    # `perfkit analyze --output /dev/null` once renamed its temp file over the machine's /dev/null
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    atomic_write(fifo, lambda fh: fh.write(b"through"))
    reader.join(timeout=10)
    assert got == [b"through"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"], "no temp file left beside it"
