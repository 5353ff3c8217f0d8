"""Frozen configuration: presets, the run config, and the cluster it runs on."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from dataclasses import fields as dataclass_fields
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
    """A named size of run: its training length, global batch and seed. What a workload trains at each preset
    is the workload's own (the bot detector's ``SIZES``, a user's ``sizes``); every value can be overridden by
    a flag."""

    name: str
    epochs: int
    batch_size: int = 1024
    seed: int = 20190101


# The article: 5 epochs at a global batch of 1024.
PRESETS: dict[str, Preset] = {
    "tiny": Preset("tiny", epochs=2, batch_size=256),
    "quick": Preset("quick", epochs=3),
    "blog": Preset("blog", epochs=5),
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(f"--preset: unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None


# -- the trainer's tuning knobs (docs/tuning.md) ---------------------------------------------------------

METRICS_CHOICES = ("full", "minimal")
ALL_REDUCE_CHOICES = ("ring", "auto", "nccl")
KNOB_FLAGS = {"steps_per_execution": "--steps-per-execution", "metrics": "--metrics",
              "bytes_per_pack": "--bytes-per-pack", "all_reduce": "--all-reduce", "prefetch": "--prefetch"}
# Which strategy each knob is a setting of: the CommunicationOptions of MultiWorkerMirroredStrategy do not
# exist under MirroredStrategy (one process: no collective between workers) nor ParameterServerStrategy (no
# all-reduce), and perfkit's ParameterServerStrategy chief times each worker's step in the step's graph,
# which it does one step per call (trainer/worker/ps.py).
KNOB_MODES = {"steps_per_execution": ("single", "multi"), "metrics": ("single", "multi", "ps"),
              "bytes_per_pack": ("multi",), "all_reduce": ("multi",), "prefetch": ("single", "multi", "ps")}


@dataclass(frozen=True)
class Knobs:
    """How perfkit's own trainer runs a workload, beyond what it computes: each knob is one TensorFlow
    setting (docs/tuning.md). The defaults are what perfkit did before the knobs existed."""

    steps_per_execution: int = 1  # Model.compile(steps_per_execution=K): K batches per tf.function call
    metrics: str = "full"  # "minimal": the loss and accuracy only (fewer metric variables to reduce)
    bytes_per_pack: int = 0  # CommunicationOptions(bytes_per_pack=N); 0: TensorFlow's default (one pack)
    all_reduce: str = "ring"  # CommunicationOptions(implementation=RING | AUTO | NCCL)
    prefetch: int | str = "auto"  # the input pipeline's ds.prefetch(N); "auto": tf.data.AUTOTUNE, 0: none

    def __post_init__(self) -> None:
        spe, pack = self.steps_per_execution, self.bytes_per_pack
        if not _is_int(spe) or spe < 1:
            raise UsageError(f"--steps-per-execution: {spe!r} is not an integer >= 1")
        if not _is_int(pack) or pack < 0:
            raise UsageError(f"--bytes-per-pack: {pack!r} is not an integer >= 0 (0: TensorFlow's default)")
        for name, choices in (("metrics", METRICS_CHOICES), ("all_reduce", ALL_REDUCE_CHOICES)):
            value = str(getattr(self, name)).strip().lower()
            if value not in choices:
                raise UsageError(f"{KNOB_FLAGS[name]}: {getattr(self, name)!r} is not one of {', '.join(choices)}")
            object.__setattr__(self, name, value)
        object.__setattr__(self, "prefetch", parse_prefetch(self.prefetch))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Knobs:
        """Inverse of ``to_dict``; missing keys (a run recorded before a knob existed) take the default."""
        names = {f.name for f in dataclass_fields(cls)}
        return cls(**{k: v for k, v in (d or {}).items() if k in names})

    def changed(self) -> dict[str, Any]:
        """The knobs that differ from the defaults, in field order."""
        default = Knobs()
        return {f.name: getattr(self, f.name) for f in dataclass_fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}

    def describe(self) -> str:
        """The non-default knobs as text, e.g. ``steps_per_execution=4, metrics=minimal``; "" when none."""
        return ", ".join(f"{k}={v}" for k, v in self.changed().items())

    def not_applied(self, mode: str) -> dict[str, Any]:
        """The non-default knobs that ``mode``'s strategy has no such setting for."""
        return {k: v for k, v in self.changed().items() if mode not in KNOB_MODES[k]}

    def for_mode(self, mode: str) -> Knobs:
        """These knobs with those that do not apply to ``mode`` back at their defaults."""
        default = Knobs()
        return replace(self, **{k: getattr(default, k) for k in self.not_applied(mode)})

    def check_mode(self, mode: str) -> None:
        """A one-line UsageError for a knob given with a mode it does not apply to (``perfkit run``)."""
        for name in self.not_applied(mode):
            where = " or ".join(f"--mode {m}" for m in KNOB_MODES[name])
            raise UsageError(f"{KNOB_FLAGS[name]}: only with {where} ({_WHY_NOT[name]}); --mode {mode} has none")


_WHY_NOT = {
    "steps_per_execution": "perfkit's ParameterServerStrategy chief times the workers' steps one per call",
    "bytes_per_pack": "an option of MultiWorkerMirroredStrategy's all-reduce",
    "all_reduce": "an option of MultiWorkerMirroredStrategy's all-reduce",
    "metrics": "", "prefetch": "",
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_prefetch(value: Any) -> int | str:
    """``auto`` or an integer >= 0 (given as an int or as text) -> "auto" or that int."""
    if _is_int(value) and value >= 0:
        return int(value)
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    if text.isdigit():
        return int(text)
    raise UsageError(f"--prefetch: {value!r} is not 'auto' or an integer >= 0 (0: no prefetch)")


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides what a run computes; stored whole in run.json."""

    mode: Mode
    preset: str
    epochs: int
    batch_size: int
    seed: int
    # The workload's own parameters (JSON values), checked by the workload: the built-in bot detector's data
    # sizes and weights (perfkit/workloads/botdetector/params.py); none for a user's workload, whose own
    # params() says what it trains.
    params: dict[str, Any] = field(default_factory=dict)
    sample_interval: float = 0.5
    label: str | None = None
    profile_steps: str = "auto"  # TF profiler window: "auto", "off" or "A-B" (global steps, 1-based)
    # A lost capture is tried again in a later attempt or epoch this many times (docs/tf-profiler-crash.md).
    profile_retries: int = 3
    workload: str = "botdetector"  # or a user's module:attr / file.py:attr (perfkit/workloads)
    knobs: Knobs = field(default_factory=Knobs)  # the trainer's tuning knobs (docs/tuning.md)
    # --mode single: MirroredStrategy over this many logical CPU devices of the one process (docs/scaling.md)
    replicas: int = 1

    def __post_init__(self) -> None:
        checks = (
            ("--epochs", self.epochs >= 1, "must be at least 1"),
            ("--batch-size", self.batch_size >= 1, "must be at least 1"),
            ("--sample-interval", 0.05 <= self.sample_interval <= 60, "must be between 0.05 and 60 seconds"),
            ("--profile-retries", 0 <= self.profile_retries <= 10, "must be between 0 and 10"),
        )
        for flag, ok, why in checks:
            if not ok:
                raise UsageError(f"{flag}: {why}")
        object.__setattr__(self, "profile_steps", tracewindow.check_spec(self.profile_steps))
        if isinstance(self.knobs, dict):
            object.__setattr__(self, "knobs", Knobs.from_dict(self.knobs))
        if self.knobs.prefetch == 0 and self.workload != "botdetector":
            raise UsageError(f"--prefetch: 0 takes the prefetch out of the built-in botdetector's pipeline; "
                             f"perfkit cannot take one out of --workload {self.workload}'s own train_dataset "
                             f"(N >= 1 adds ds.prefetch(N) after it; auto leaves it as it is)")
        self._check_replicas()

    def _check_replicas(self) -> None:
        n = self.replicas
        if not _is_int(n) or n < 1:
            raise UsageError(f"--replicas: {n!r} is not an integer >= 1")
        if n > 1 and Mode(self.mode) is not Mode.single:
            raise UsageError(f"--replicas: only with --mode single (N replicas in one process); --mode "
                             f"{self.mode.value} runs one replica per worker process (--workers N)")
        if self.batch_size % n:
            raise UsageError(f"--replicas: the global batch {self.batch_size} does not divide among {n} replicas")

    def check_batch(self, n_train: int, n_test: int) -> None:
        """Every epoch needs at least one whole global batch of training and of validation samples (the
        workload's ``samples()``), and the trace window must fall inside the run."""
        for what, n in (("training", n_train), ("validation", n_test)):
            if self.batch_size > n:
                raise UsageError(f"--batch-size: {self.batch_size} is larger than the {n} {what} samples")
        # A window past the end; with several batches per execution the window counts executions.
        steps = tracewindow.executions_per_epoch(n_train // self.batch_size, self.knobs.steps_per_execution)
        tracewindow.resolve(self.profile_steps, steps, self.epochs, self.knobs.steps_per_execution)

    @classmethod
    def from_preset(cls, mode: Mode, preset: str, **overrides: Any) -> RunConfig:
        """The preset's values with every override that is not ``None`` applied."""
        p = get_preset(preset)
        base = cls(mode=mode, preset=p.name, epochs=p.epochs, batch_size=p.batch_size, seed=p.seed)
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """Inverse of ``to_dict`` (a worker process reads its config from the launch file, the analysis a
        run's run.json); a run recorded before the knobs takes their defaults."""
        fields = dict(d)
        fields["mode"] = Mode(fields["mode"])
        fields["knobs"] = Knobs.from_dict(fields.get("knobs"))
        # Recorded before the bot detector's parameters moved into ``params``, every config had them as fields
        # of its own; they were the bot detector's, and meant nothing to another workload.
        old = {k: fields.pop(k) for k in _BEFORE_PARAMS if k in fields}
        if fields.get("workload", "botdetector") == "botdetector":
            fields["params"] = {**{k: v for k, v in old.items() if v is not None}, **(fields.get("params") or {})}
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mode"] = self.mode.value
        return d


# The built-in workload's parameters as run.json held them until they moved into ``params``: only read here.
_BEFORE_PARAMS = ("train_players", "test_players", "sequence_length", "class_weight", "data_path")


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def sanitize_id(text: str, what: str = "--run-id") -> str:
    """Make a user string safe as one path component: ``[A-Za-z0-9._-]``, no leading dot, <= 80 chars."""
    cleaned = _UNSAFE.sub("-", text.strip()).strip("-.")[:80]
    if not cleaned:
        raise UsageError(f"{what}: {text!r} has no usable characters (letters, digits, '.', '_', '-')")
    return cleaned
