"""Loading a user's workload by spec: what is accepted, and each fault as a one-line error naming the spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.errors import UsageError
from perfkit.workloads import BUILTIN, config_overrides, info, load, normalise_spec

GOOD = '''
class W:
    name, version, global_batch = "toy", "2", 32
    def __init__(self, preset, seed):
        self.preset, self.seed = preset, seed
    def params(self): return {"preset": self.preset, "seed": self.seed}
    def samples(self): return 640, 128
    def build_model(self): raise NotImplementedError
    def train_dataset(self, ctx, b): raise NotImplementedError
    def eval_dataset(self, ctx, b): raise NotImplementedError

instance = W("quick", 1)
class Half:
    name, version = "half", "1"
    def params(self): return {}
half = Half()
def broken(preset, seed): raise RuntimeError("no GPU in this sandbox\\nsecond line")
'''


@pytest.fixture()
def toy(tmp_path: Path) -> Path:
    path = tmp_path / "toy_workload.py"
    path.write_text(GOOD)
    return path


def test_a_class_is_called_with_preset_and_seed_and_an_instance_is_used_as_is(toy: Path) -> None:
    made = load(f"{toy}:W", "tiny", 7)
    assert (made.preset, made.seed) == ("tiny", 7)
    assert info(f"{toy}:W", made).to_dict() == {"spec": f"{toy}:W", "name": "toy", "version": "2",
                                                 "params": {"preset": "tiny", "seed": 7}}
    assert load(f"{toy}:instance", "tiny", 7).preset == "quick"
    assert load(f"{toy}:W", "quick", 1).__class__ is made.__class__, "a file is executed once per process"


def test_module_specs_import_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_pkg_wl.py").write_text(GOOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load("my_pkg_wl:W", "quick", 3).seed == 3


@pytest.mark.parametrize(("spec", "message"), [
    ("no-colon", "expected module:attr or path/to/file.py:attr"),
    ("mod:1bad", "expected module:attr"),
    ("no_such_module_xyz:w", "no module named 'no_such_module_xyz'"),
    ("{dir}/missing.py:w", "missing.py: no such file"),
    ("{toy}:nothing", "has no attribute 'nothing'"),
    ("{toy}:half", "Half object has no samples, build_model, train_dataset, eval_dataset"),
    ("{toy}:broken", "broken(preset='quick', seed=1) failed: RuntimeError: no GPU in this sandbox second line"),
])
def test_bad_specs_are_one_line_errors_naming_the_spec(toy: Path, spec: str, message: str) -> None:
    spec = spec.format(toy=toy, dir=toy.parent)
    with pytest.raises(UsageError) as err:
        load(spec, "quick", 1)
    text = str(err.value)
    assert text.startswith(f"--workload {spec}: ") and message in text and "\n" not in text


def test_a_module_that_fails_to_import_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad_import.py"
    bad.write_text("import no_such_dependency_abc\n")
    with pytest.raises(UsageError, match=r"importing .*bad_import.py failed: ModuleNotFoundError: No module named"):
        load(f"{bad}:w", "quick", 1)


def test_config_takes_the_workloads_batch_and_refuses_the_bot_detectors_data_flags(toy: Path) -> None:
    assert config_overrides(None, "quick", None, None) == {"workload": BUILTIN, "params": {
        "train_players": 60_000, "test_players": 15_000, "sequence_length": 7, "class_weight": {"0": 1.0, "1": 4.0},
        "data_path": None}}
    rel = Path("toy_workload.py")
    assert normalise_spec(f"{rel}:W") == f"{rel.resolve()}:W"
    assert config_overrides(f"{toy}:W", "quick", None, None) == {"workload": f"{toy}:W", "batch_size": 32}
    assert config_overrides(f"{toy}:W", "quick", None, 128) == {"workload": f"{toy}:W"}, "--batch-size wins"
    with pytest.raises(UsageError, match=r"^--train-players: only with the built-in botdetector workload"):
        config_overrides(f"{toy}:W", "quick", None, None, data=None, train_players=100)
