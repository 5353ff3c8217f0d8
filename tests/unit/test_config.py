from __future__ import annotations

import pytest

from perfkit.config import PRESETS, Mode, RunConfig, sanitize_id
from perfkit.errors import UsageError
from perfkit.workloads import checked, config_overrides
from perfkit.workloads.botdetector import BotDetector
from perfkit.workloads.botdetector.params import SIZES, BotParams, configure, parse_class_weight


def test_presets_follow_the_article() -> None:
    blog = PRESETS["blog"]
    assert (blog.epochs, blog.batch_size) == (5, 1024)
    bot = BotParams.for_preset("blog")
    assert (bot.train_players, bot.test_players, bot.sequence_length) == (716_392, 182_158, 7)
    assert set(SIZES) == set(PRESETS), "the bot detector needs its sizes at every preset"


def test_overrides_apply_and_none_keeps_preset() -> None:
    cfg = RunConfig.from_preset(Mode.single, "quick", epochs=1, batch_size=None)
    assert cfg.epochs == 1 and cfg.batch_size == PRESETS["quick"].batch_size
    assert cfg.params == {} and BotParams.of(cfg).class_weight == {0: 1.0, 1: 4.0}  # the preset's
    assert checked(cfg).params == {"train_players": 60_000, "test_players": 15_000, "sequence_length": 7,
                                   "class_weight": {"0": 1.0, "1": 4.0}, "data_path": None}  # as applied
    assert cfg.to_dict()["mode"] == "single" and "class_weight" not in cfg.to_dict()


def test_the_bot_detectors_parameters_are_its_own_and_checked_by_it() -> None:
    fields = config_overrides(None, "tiny", None, None, train_players=4096, class_weight="0:1,1:2", data=None)
    cfg = RunConfig.from_preset(Mode.multi, "tiny", **fields)
    assert cfg.params["train_players"] == 4096 and cfg.params["class_weight"] == {"0": 1.0, "1": 2.0}
    assert RunConfig.from_dict(cfg.to_dict()) == cfg  # as a worker reads it from its launch file
    bot = BotDetector(cfg).p
    assert (bot.train_players, bot.test_players, bot.class_weight) == (4096, 512, {0: 1.0, 1: 2.0})
    assert configure(cfg, test_players=256).params["test_players"] == 256
    for bad, flag in (({"train_players": 0}, "--train-players"), ({"sequence_length": "7"}, "--sequence-length"),
                      ({"class_weight": {"0": 1}}, "--class-weight"), ({"days": 7}, "no parameter 'days'")):
        with pytest.raises(UsageError, match=flag):
            BotDetector(RunConfig.from_preset(Mode.single, "tiny", params=bad))


def test_a_config_recorded_before_params_reads_its_parameters_as_params() -> None:
    old = {"mode": "multi", "preset": "tiny", "epochs": 2, "batch_size": 256, "seed": 1, "train_players": 1024,
           "test_players": 512, "sequence_length": 7, "class_weight": {"0": 1.0, "1": 4.0}, "data_path": None}
    cfg = RunConfig.from_dict(old)
    assert cfg.params == {"train_players": 1024, "test_players": 512, "sequence_length": 7,
                          "class_weight": {"0": 1.0, "1": 4.0}}
    assert BotParams.of(cfg).train_players == 1024
    assert RunConfig.from_dict({**old, "workload": "mine.py:W"}).params == {}  # they were never a user's


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
    with pytest.raises(UsageError, match="--batch-size: 4096 is larger than the 2048 training samples"):
        checked(RunConfig.from_preset(Mode.single, "tiny", batch_size=4096))
    with pytest.raises(UsageError, match="the 100 validation samples"):
        checked(configure(RunConfig.from_preset(Mode.single, "tiny"), test_players=100))
    cfg = RunConfig.from_preset(Mode.single, "tiny")
    with pytest.raises(UsageError, match="the 10 training"):
        cfg.check_batch(10, 1000)
