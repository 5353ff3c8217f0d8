"""The run's janitor (a real helper process, no training) and the no-namespace path of the sandbox."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from unittest import mock

import pytest

from perfkit.cluster import load_cluster
from perfkit.errors import UsageError
from perfkit.trainer.hosts import netns
from perfkit.trainer.hosts.janitor import Janitor
from tests import clusters


def test_the_janitor_removes_what_was_registered_when_its_pipe_closes(tmp_path: Path) -> None:
    kept, tmp, run = tmp_path / "kept", tmp_path / "backup", tmp_path / "run" / "tensorboard"
    for d in (kept, tmp, run / ".capture-1", run / ".capture-2", run / "plugins"):
        d.mkdir(parents=True)
    janitor = Janitor()
    janitor.start()
    janitor.register("dir", tmp)
    janitor.register("glob", run / ".capture-*")
    time.sleep(0.3)
    assert tmp.exists(), "nothing is removed while the launcher lives"
    os.kill(janitor._proc.pid, signal.SIGTERM)  # type: ignore[union-attr]  # ignored: only the pipe ends it
    janitor.close(timeout=30)
    assert not tmp.exists() and not list(run.glob(".capture-*"))
    assert kept.exists() and (run / "plugins").exists()


def _pair(tmp_path: Path, link: str = "") -> Path:
    return clusters.write(tmp_path / "pair.toml", clusters.pair(extra=link))


def test_without_namespaces_the_sandbox_says_why(tmp_path: Path) -> None:
    with mock.patch.object(netns, "why_unavailable", return_value="not root (network namespaces need CAP_SYS_ADMIN)"):
        box = netns.Sandbox.create(load_cluster(_pair(tmp_path)), lambda n: None)
        assert box.mechanism == "none" and box.wrap("h0") == []
        assert box.to_dict()["reachable_from_other_machines"] is True and "not root" in box.to_dict()["reason"]
        with pytest.raises(UsageError, match=r"hosts\[0\].link: emulated links need network namespaces.*not root"):
            netns.Sandbox.create(load_cluster(_pair(tmp_path, "link = { bandwidth_mbit = 100 }\n")), lambda n: None)


def test_root_without_cap_sys_admin_falls_back_like_not_root(tmp_path: Path) -> None:
    def refuse(*args: str, ns: str | None = None) -> str:
        raise netns._Failed("`ip netns add pk1x0-0`: mount --make-shared /run/netns failed: Operation not permitted")

    with mock.patch.object(netns, "why_unavailable", return_value=None), mock.patch.object(netns, "_ip", refuse), \
            mock.patch.object(netns, "remove_stale"):
        box = netns.Sandbox.create(load_cluster(_pair(tmp_path)), lambda n: None)
    assert box.mechanism == "none" and "Operation not permitted" in str(box.reason)
