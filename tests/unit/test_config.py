from __future__ import annotations

import pytest

from perfkit.config import PRESETS, Mode, RunConfig, parse_class_weight, sanitize_id
from perfkit.errors import UsageError


def test_presets_follow_the_article() -> None:
    blog = PRESETS["blog"]
    assert (blog.train_players, blog.test_players, blog.epochs, blog.batch_size, blog.sequence_length) == (
        716_392, 182_158, 5, 1024, 7)


def test_overrides_apply_and_none_keeps_preset() -> None:
    cfg = RunConfig.from_preset(Mode.single, "quick", epochs=1, batch_size=None)
    assert cfg.epochs == 1 and cfg.batch_size == PRESETS["quick"].batch_size
    assert cfg.class_weight == {0: 1.0, 1: 4.0}
    assert cfg.to_dict()["mode"] == "single" and cfg.to_dict()["class_weight"] == {"0": 1.0, "1": 4.0}


@pytest.mark.parametrize("field,value,flag", [("epochs", 0, "--epochs"), ("batch_size", 0, "--batch-size"),
                                              ("sample_interval", 0.0, "--sample-interval")])
def test_bad_values_name_the_flag(field: str, value: object, flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        RunConfig.from_preset(Mode.single, "tiny", **{field: value})


def test_unknown_preset_lists_choices() -> None:
    with pytest.raises(UsageError, match="tiny, quick, blog"):
        RunConfig.from_preset(Mode.single, "huge")


def test_class_weight_parsing() -> None:
    assert parse_class_weight("0:1,1:4") == {0: 1.0, 1: 4.0}
    assert parse_class_weight(" 1:2.5 , 0:1 ") == {0: 1.0, 1: 2.5}
    for bad in ("1:4", "0:1,1:-4", "0:1,2:4", "zero:1,1:4", "0=1,1=4"):
        with pytest.raises(UsageError, match="--class-weight"):
            parse_class_weight(bad)


def test_sanitize_id_makes_one_safe_path_component() -> None:
    assert sanitize_id("../../etc/passwd") == "etc-passwd"
    assert sanitize_id("my run #1") == "my-run-1"
    assert "/" not in sanitize_id("a/b\\c") and not sanitize_id(".hidden").startswith(".")
    with pytest.raises(UsageError, match="--run-id"):
        sanitize_id("../..")


def test_a_batch_larger_than_either_split_is_refused_up_front() -> None:
    with pytest.raises(UsageError, match="--batch-size: 4096 is larger than the 2048 training sequences"):
        RunConfig.from_preset(Mode.single, "tiny", batch_size=4096)
    with pytest.raises(UsageError, match="the 100 validation sequences"):
        RunConfig.from_preset(Mode.single, "tiny", test_players=100)
    cfg = RunConfig.from_preset(Mode.single, "tiny")
    with pytest.raises(UsageError, match="the 10 training"):
        cfg.check_batch(10, 1000)
