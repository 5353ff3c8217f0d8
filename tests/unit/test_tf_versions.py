"""The TensorFlow range perfkit supports (perfkit/_tf.py), read from the environment's metadata without
importing TensorFlow: outside it, one line naming the version and what to install."""

from __future__ import annotations

from importlib import metadata

import pytest

from perfkit import _tf
from perfkit.errors import UsageError


@pytest.mark.parametrize(("version", "ok", "legacy"), [
    ("2.14.1", False, False), ("2.15.1", True, False), ("2.16.2", True, True), ("2.21.0", True, True),
    ("2.22.0", False, True),
])
def test_the_supported_range_and_the_legacy_keras_switch(monkeypatch: pytest.MonkeyPatch, version: str, ok: bool,
                                                         legacy: bool) -> None:
    monkeypatch.setattr(_tf.metadata, "version", lambda name: version)
    assert _tf.installed_version() == tuple(int(x) for x in version.split(".")[:2])
    assert _tf.legacy_switch() is legacy
    if ok:
        _tf.check_supported()
        return
    with pytest.raises(UsageError) as info:
        _tf.check_supported()
    text = str(info.value)
    assert f"TensorFlow {version.rsplit('.', 1)[0]}" in text and "perfkit supports 2.15 to 2.21" in text
    assert "\n" not in text


def test_no_tensorflow_is_left_to_the_command_that_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(_tf.metadata, "version", missing)
    assert _tf.installed_version() is None
    _tf.check_supported()


def test_the_keras_of_a_callback_class_is_told_by_its_version() -> None:
    import sys
    import types

    from perfkit.trainer.worker.fitpart import keras_major

    for root, version, major in (("fakekeras2", "2.15.0", 2), ("fakekeras3", "3.15.1", 3)):
        module = types.ModuleType(root)
        module.__version__ = version  # type: ignore[attr-defined]
        sys.modules[root] = module
        try:
            callback = type("Callback", (), {"__module__": f"{root}.src.callbacks"})
            assert keras_major(callback) == major
        finally:
            del sys.modules[root]
