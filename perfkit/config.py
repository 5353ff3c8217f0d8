"""Frozen configuration: presets, the run config, and the cluster it runs on."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

from perfkit.errors import UsageError
from perfkit.profiler import tracewindow


class Mode(str, Enum):
    single = "single"
    multi = "multi"
    ps = "ps"


@dataclass(frozen=True)
class Preset:
    """Sizes and training length of a named workload. Every value can be overridden by a flag."""

    name: str
    train_players: int
    test_players: int
    epochs: int
    batch_size: int = 1024
    sequence_length: int = 7
    seed: int = 20190101


# The article: 716,392 train / 182,158 test sequences, 5 epochs, global batch 1024.
PRESETS: dict[str, Preset] = {
    "tiny": Preset("tiny", train_players=2048, test_players=512, epochs=2, batch_size=256),
    "quick": Preset("quick", train_players=60_000, test_players=15_000, epochs=3),
    "blog": Preset("blog", train_players=716_392, test_players=182_158, epochs=5),
}

DEFAULT_CLASS_WEIGHT: dict[int, float] = {0: 1.0, 1: 4.0}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(f"--preset: unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None


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
class RunConfig:
    """Everything that decides what a run computes; stored whole in run.json."""

    mode: Mode
    preset: str
    train_players: int
    test_players: int
    epochs: int
    batch_size: int
    sequence_length: int
    seed: int
    class_weight: dict[int, float] = field(default_factory=lambda: dict(DEFAULT_CLASS_WEIGHT))
    data_path: str | None = None
    sample_interval: float = 0.5
    label: str | None = None
    profile_steps: str = "auto"  # TF profiler window: "auto", "off" or "A-B" (global steps, 1-based)
    # A lost capture is tried again in a later attempt or epoch this many times (docs/tf-profiler-crash.md).
    profile_retries: int = 3
    workload: str = "botdetector"  # or a user's module:attr / file.py:attr (perfkit/workloads)

    def __post_init__(self) -> None:
        checks = (
            ("--epochs", self.epochs >= 1, "must be at least 1"),
            ("--batch-size", self.batch_size >= 1, "must be at least 1"),
            ("--train-players", self.train_players >= 1, "must be at least 1"),
            ("--test-players", self.test_players >= 1, "must be at least 1"),
            ("--sequence-length", self.sequence_length >= 1, "must be at least 1"),
            ("--sample-interval", 0.05 <= self.sample_interval <= 60, "must be between 0.05 and 60 seconds"),
            ("--profile-retries", 0 <= self.profile_retries <= 10, "must be between 0 and 10"),
        )
        for flag, ok, why in checks:
            if not ok:
                raise UsageError(f"{flag}: {why}")
        object.__setattr__(self, "profile_steps", tracewindow.check_spec(self.profile_steps))
        self.check_batch(self.train_players, self.test_players)

    def check_batch(self, n_train: int, n_test: int) -> None:
        """Every epoch needs at least one whole global batch of training and of validation rows."""
        for what, n in (("training", n_train), ("validation", n_test)):
            if self.batch_size > n:
                raise UsageError(f"--batch-size: {self.batch_size} is larger than the {n} {what} sequences")
        tracewindow.resolve(self.profile_steps, n_train // self.batch_size, self.epochs)  # a window past the end

    @classmethod
    def from_preset(cls, mode: Mode, preset: str, **overrides: Any) -> RunConfig:
        """The preset's values with every override that is not ``None`` applied."""
        p = get_preset(preset)
        base = cls(
            mode=mode,
            preset=p.name,
            train_players=p.train_players,
            test_players=p.test_players,
            epochs=p.epochs,
            batch_size=p.batch_size,
            sequence_length=p.sequence_length,
            seed=p.seed,
        )
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})

    @property
    def test_share(self) -> float:
        return self.test_players / (self.train_players + self.test_players)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """Inverse of ``to_dict`` (a worker process reads its config from the launch file)."""
        fields = dict(d)
        fields["mode"] = Mode(fields["mode"])
        fields["class_weight"] = {int(k): float(v) for k, v in fields["class_weight"].items()}
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mode"] = self.mode.value
        d["class_weight"] = {str(k): v for k, v in self.class_weight.items()}
        return d


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def sanitize_id(text: str, what: str = "--run-id") -> str:
    """Make a user string safe as one path component: ``[A-Za-z0-9._-]``, no leading dot, <= 80 chars."""
    cleaned = _UNSAFE.sub("-", text.strip()).strip("-.")[:80]
    if not cleaned:
        raise UsageError(f"{what}: {text!r} has no usable characters (letters, digits, '.', '_', '-')")
    return cleaned
