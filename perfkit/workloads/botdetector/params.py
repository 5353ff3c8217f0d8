"""The bot detector's own parameters: its data sizes at each preset, the days per sequence, the class weights
and the user's data file. They travel in the run config's ``params`` (JSON values), as any workload's would,
and are checked here, where they mean something, each fault naming the flag that sets it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Any

from perfkit.config import RunConfig, get_preset
from perfkit.errors import UsageError

# Training and validation sequences (players) at each preset; the article's is "blog": 716,392 / 182,158.
SIZES: dict[str, tuple[int, int]] = {"tiny": (2048, 512), "quick": (60_000, 15_000), "blog": (716_392, 182_158)}
SEQUENCE_LENGTH = 7  # the article's 7 days a player
DEFAULT_CLASS_WEIGHT: dict[int, float] = {0: 1.0, 1: 4.0}


def parse_class_weight(text: str) -> dict[int, float]:
    """Parse ``"0:1,1:4"`` into ``{0: 1.0, 1: 4.0}``; both classes must be given, weights positive."""
    weights: dict[int, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition(":")
        try:
            label, weight = int(key.strip()), float(value.strip())
        except ValueError:
            label, weight = -1, -1.0
        if not sep or label not in (0, 1) or not weight > 0:
            raise UsageError(f"--class-weight: {text!r} is not of the form '0:W0,1:W1' with positive weights")
        weights[label] = weight
    if set(weights) != {0, 1}:
        raise UsageError(f"--class-weight: {text!r} must give a weight for both classes 0 and 1")
    return weights


@dataclass(frozen=True)
class BotParams:
    """What the bot detector trains on: ``train_players`` / ``test_players`` sequences of ``sequence_length``
    days (a generated table, or the split of ``data_path``), weighted by ``class_weight`` in training."""

    train_players: int
    test_players: int
    sequence_length: int = SEQUENCE_LENGTH
    class_weight: dict[int, float] = field(default_factory=lambda: dict(DEFAULT_CLASS_WEIGHT))
    data_path: str | None = None

    def __post_init__(self) -> None:
        for name in ("train_players", "test_players", "sequence_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"--{name.replace('_', '-')}: {value!r} is not an integer >= 1")
        try:  # a config read from JSON has the classes as text
            weights = {int(k): float(v) for k, v in dict(self.class_weight).items()}
        except (TypeError, ValueError):
            weights = {}
        if set(weights) != {0, 1} or not all(w > 0 for w in weights.values()):
            raise UsageError(f"--class-weight: {self.class_weight!r} must give a positive weight to classes 0 and 1")
        object.__setattr__(self, "class_weight", weights)

    @classmethod
    def for_preset(cls, preset: str, **given: Any) -> BotParams:
        """The preset's sizes with every value in ``given`` that is not ``None`` (an unknown name: TypeError)."""
        train, test = SIZES[get_preset(preset).name]
        return replace(cls(train, test), **{k: v for k, v in given.items() if v is not None})

    @classmethod
    def of(cls, cfg: RunConfig) -> BotParams:
        """A run config's parameters, checked; what it leaves out is its preset's (a config built without any,
        or recorded before they moved out of the run config's own fields, where ``RunConfig.from_dict``
        finds them)."""
        names = [f.name for f in dataclass_fields(cls)]
        unknown = sorted(set(cfg.params) - set(names))
        if unknown:
            raise UsageError(f"--workload {cfg.workload}: no parameter {unknown[0]!r} (it has {', '.join(names)})")
        return cls.for_preset(cfg.preset, **cfg.params)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["class_weight"] = {str(k): v for k, v in self.class_weight.items()}
        return d

    def check_run(self, cfg: RunConfig) -> None:
        """The run's global batch and trace window against these sizes, before any data is made; the split of
        a user's file is known once the file is read, and the trainer checks it then."""
        if self.data_path is None:
            cfg.check_batch(self.train_players, self.test_players)

    @property
    def test_share(self) -> float:
        return self.test_players / (self.train_players + self.test_players)


def configure(cfg: RunConfig, **changes: Any) -> RunConfig:
    """``cfg`` with the bot detector's parameters changed (a value of ``None`` leaves one as it is)."""
    return replace(cfg, params=replace(BotParams.of(cfg), **{k: v for k, v in changes.items()
                                                             if v is not None}).to_dict())
