"""run.json as typed records: the run (``RunMeta``), where it ran (``ClusterRecord``) and each worker process
(``WorkerRecord``), parsed from the file as written and written back from them (``to_dict``).

Frozen dataclasses, not pydantic: the project's records are frozen dataclasses throughout, the types needed
are few and flat, and a validation library would be a new dependency for one file. What this version does not
know (a newer writer's keys, a bench's own) is kept in ``extra`` and written back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from perfkit.errors import ResultsError

SCHEMA_VERSION = 1  # of run.json; a reader refuses a newer one

def _field(d: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = d.get(name)
    if value is None or (isinstance(value, kind) and not (isinstance(value, bool) and bool not in _kinds(kind))):
        return value
    names = "/".join(k.__name__ for k in _kinds(kind))
    raise ResultsError(f"{where}: {name} is {type(value).__name__} {value!r:.40}, not {names}")


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _mapping(d: Mapping[str, Any], name: str, where: str) -> dict[str, Any]:
    return dict(_field(d, name, dict, where) or {})


@dataclass(frozen=True)
class FitPlan:
    """What a worker's fit said of itself before its first step (run.json's ``plan``, each worker's ``plan``):
    written by perfkit's own trainer whole, by a recorded script's fit or loop as far as it knows. Anything
    else a writer adds (a custom loop's step function, a ps chief's coordinator counts) is kept in ``extra``."""

    epochs: int | None = None
    steps_per_epoch: int | None = None  # batches; None: a custom loop whose epochs differ
    validation_steps: int | None = None  # whole global batches
    global_batch: int | None = None
    local_batch: int | None = None
    params: int | None = None
    # Batches per call of the training function, and the calls per epoch: what a step record, a trace window
    # step and a traced "train" marker each are.
    steps_per_execution: int | None = None
    executions_per_epoch: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, d: Any) -> FitPlan:
        """A plan as written; a value that is no integer where one is meant (a writer's own) stays in
        ``extra`` as it is, never failing the run's record."""
        if not isinstance(d, dict):
            return cls()
        names = [f.name for f in fields(cls) if f.name != "extra"]
        ints = {k: d.get(k) for k in names if isinstance(d.get(k), int) and not isinstance(d.get(k), bool)}
        return cls(**ints, extra={k: v for k, v in d.items() if k not in ints and v is not None})

    def to_dict(self) -> dict[str, Any]:
        """The keys that are set, as written."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**{k: v for k, v in out.items() if v is not None}, **self.extra}

    def get(self, key: str) -> Any:
        """A field or an extra key by name (None where unset): for the few readers of a writer's own keys."""
        return getattr(self, key) if key in self.__dataclass_fields__ and key != "extra" else self.extra.get(key)


@dataclass(frozen=True)
class Phase:
    """One state a worker reported during its start-up and run (status.json's ``phases``): when it began, on
    the wall clock, and the process's CPU-seconds by then (every thread's)."""

    state: str
    t_wall_ns: int
    cpu_s: float | None = None

    @classmethod
    def parse(cls, d: Any) -> Phase | None:
        """None for an entry without a state and an integer time (a status file is read from disk)."""
        if not isinstance(d, dict) or not isinstance(d.get("state"), str) or not isinstance(d.get("t_wall_ns"), int):
            return None
        cpu = d.get("cpu_s")
        return cls(d["state"], d["t_wall_ns"], float(cpu) if isinstance(cpu, (int, float)) else None)

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "t_wall_ns": self.t_wall_ns, "cpu_s": self.cpu_s}


def _phases(value: Any) -> tuple[Phase, ...]:
    return tuple(p for p in (Phase.parse(x) for x in value) if p is not None) if isinstance(value, list) else ()


# What a worker reports of itself in its status.json that its record keeps (WorkerRecord.reported), and the
# type each must have: a status file is read from disk, and a value of another type is left out.
_REPORTED: dict[str, type] = {"anchor_wall_ns": int, "anchor_mono_ns": int, "started_wall_ns": int, "state": str,
                              "profile": dict, "calibration": dict, "plan": dict, "checkpoints": dict}


@dataclass(frozen=True)
class WorkerRecord:
    """One worker process as run.json records it (``workers[]``)."""

    index: int
    host: str | None = None
    pid: int | None = None
    role: str | None = None
    endpoint: str | None = None
    anchor_wall_ns: int | None = None  # the same instant on the wall clock and on ``time.monotonic_ns``
    anchor_mono_ns: int | None = None
    exit_code: int | None = None
    state: str | None = None
    profile: dict[str, Any] | None = None  # its trace capture (status, window, file, attempts)
    calibration: dict[str, Any] | None = None  # all-reduce timings after training
    plan: FitPlan | None = None  # what its fit said of itself: epochs, steps, batch, executions
    started_wall_ns: int | None = None  # the process's start (the kernel's), to 10 ms
    phases: tuple[Phase, ...] = ()  # each state it reported (status.json)
    teardown: dict[str, Any] | None = None  # its last step to its exit: s, where, stopped (trainer/teardown.py)
    died: dict[str, Any] | None = None  # a ParameterServerStrategy worker dead mid-run (trainer/lostworkers.py)
    checkpoints: dict[str, Any] | None = None  # its checkpoint saves: count and seconds (worker/checkpoints.py)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, d: Any, where: str) -> WorkerRecord:
        if not isinstance(d, dict) or not isinstance(d.get("index"), int):
            raise ResultsError(f"{where}: a worker entry without an integer index: {d!r:.60}")
        ints = {k: _field(d, k, int, where)
                for k in ("pid", "anchor_wall_ns", "anchor_mono_ns", "exit_code", "started_wall_ns")}
        texts = {k: _field(d, k, str, where) for k in ("host", "role", "endpoint", "state")}
        maps = {k: _field(d, k, dict, where) for k in ("profile", "calibration", "teardown", "died", "checkpoints")}
        plan = _field(d, "plan", dict, where)
        phases = _phases(_field(d, "phases", list, where))
        known = {"index", "phases", "plan", *ints, *texts, *maps}
        return cls(index=d["index"], **ints, **texts, **maps, phases=phases,
                   plan=FitPlan.parse(plan) if plan is not None else None,
                   extra={k: v for k, v in d.items() if k not in known})

    @classmethod
    def reported(cls, index: int, status: Mapping[str, Any], **known: Any) -> WorkerRecord:
        """The one constructor of a worker's record: what the worker reported of itself (its status.json:
        anchors, state, profile, plan, calibration, start and phases) and what its starter knows (``known``:
        host, pid, role, endpoint, exit code, teardown, death; keys that are no field are kept in ``extra``)."""
        own = {k: v if isinstance(v, kind) and not isinstance(v, bool) else None
               for k, kind in _REPORTED.items() for v in [status.get(k)]}
        names = {f.name for f in fields(cls)} - {"index", "phases", "extra"}
        given = {k: v for k, v in known.items() if k in names}
        for source in (own, given):
            if isinstance(source.get("plan"), dict):
                source["plan"] = FitPlan.parse(source["plan"])
        return cls(index=index, **{**own, **given}, phases=_phases(status.get("phases")),
                   extra={k: v for k, v in known.items() if k not in names})

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}
        out["plan"] = self.plan.to_dict() if self.plan is not None else None
        out["phases"] = [p.to_dict() for p in self.phases]
        return {**out, **self.extra}

    @property
    def clock_offset_ns(self) -> int | None:
        """wall - monotonic on this worker's host (its anchor: one instant read on both clocks); every clock
        conversion of the analysis goes through it. None: not recorded."""
        if not self.anchor_wall_ns or self.anchor_mono_ns is None:
            return None
        return self.anchor_wall_ns - self.anchor_mono_ns


@dataclass(frozen=True)
class ClusterRecord:
    """Where the workers ran (``cluster``): hosts with their cores, each worker's host and endpoint, the
    CPU budgets applied."""

    num_workers: int | None = None
    hosts: tuple[dict[str, Any], ...] = ()
    workers: tuple[dict[str, Any], ...] = ()
    tasks: tuple[dict[str, Any], ...] = ()  # every process with its role and task (runs before ps mode: none)
    local_workers: tuple[int, ...] = ()
    emulated: bool = False
    cpu_budget: dict[str, Any] = field(default_factory=dict)
    declared: dict[str, Any] | None = None  # the cluster file's hosts when the runtime one differs
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, d: Any, where: str) -> ClusterRecord:
        if not isinstance(d, dict):
            return cls()
        lists = {k: tuple(_field(d, k, list, where) or ()) for k in ("hosts", "workers", "tasks", "local_workers")}
        known = {"num_workers", "emulated", "cpu_budget", "declared", *lists}
        return cls(num_workers=_field(d, "num_workers", int, where), emulated=bool(_field(d, "emulated", bool, where)),
                   cpu_budget=_mapping(d, "cpu_budget", where), declared=_field(d, "declared", dict, where), **lists,
                   extra={k: v for k, v in d.items() if k not in known})

    @classmethod
    def of(cls, spec: Mapping[str, Any], **values: Any) -> ClusterRecord:
        """The record of a cluster as placed: a ``ClusterSpec.to_dict`` (hosts, workers, tasks; its other keys
        kept in ``extra``) and the fields in ``values`` (a key that is no field also to ``extra``)."""
        lists = {k: tuple(spec.get(k) or ()) for k in ("hosts", "workers", "tasks")}
        names = {f.name for f in fields(cls)} - {"extra"}
        given = {k: tuple(v) if k == "local_workers" else v for k, v in values.items() if k in names}
        extra = {**{k: v for k, v in spec.items() if k not in lists}, **{k: v for k, v in values.items()
                                                                         if k not in names}}
        return cls(**{**lists, **given}, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if k != "extra"}
        return {**out, **self.extra}

    def host_of(self) -> dict[int, str]:
        """Task index -> host: every worker, and under ParameterServerStrategy its servers and chief too."""
        return {int(w["index"]): str(w.get("host")) for w in self.tasks or self.workers
                if isinstance(w, dict) and "index" in w}


# Top-level keys with a type; everything else a writer puts in run.json is carried in ``extra``.
_TEXT = ("run_id", "status", "started", "ended", "error", "mode", "strategy", "preset", "clock")
_MAPS = ("config", "workload", "data", "part", "profile", "launch", "network", "sampler", "failure", "verifies",
         "tries", "worker_start", "clock_anchor")


@dataclass(frozen=True)
class RunMeta:
    """run.json: what ran, where, how it ended. Written only through ``RunDir``; read with ``parse``."""

    schema_version: int
    run_id: str
    status: str = "unknown"
    started: str | None = None
    ended: str | None = None
    error: str | None = None
    mode: str | None = None  # single | multi | ps
    strategy: str | None = None
    preset: str | None = None  # None: a user's own command (perfkit launch, perfkit.record)
    clock: str | None = None  # "wall" once the loader moved merged parts onto the wall clock
    config: dict[str, Any] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    part: dict[str, Any] = field(default_factory=dict)  # this host's part of a run: name, workers
    profile: dict[str, Any] = field(default_factory=dict)
    launch: dict[str, Any] = field(default_factory=dict)  # perfkit launch: the command, whether it recorded
    network: dict[str, Any] = field(default_factory=dict)
    sampler: dict[str, Any] = field(default_factory=dict)
    failure: dict[str, Any] = field(default_factory=dict)
    verifies: dict[str, Any] = field(default_factory=dict)  # a --verify run: the prediction it checks
    # A perfkit tune run of advice: the run advised (run_id), the causes acted on (kinds: CauseKind values)
    # and the speedup over that run predicted (predicted_speedup, predicted_lo, predicted_hi).
    tries: dict[str, Any] = field(default_factory=dict)
    worker_start: dict[str, Any] = field(default_factory=dict)  # forked from the fork server, or exec'd
    # The launcher's own anchor (wall_ns, mono_ns): a part whose processes record nothing (a parameter-server
    # script's servers) still lines up its CPU samples with the other parts by it.
    clock_anchor: dict[str, Any] = field(default_factory=dict)
    cluster: ClusterRecord = field(default_factory=ClusterRecord)
    workers: tuple[WorkerRecord, ...] = ()
    parts: tuple[str, ...] = ()
    restarts: tuple[dict[str, Any], ...] = ()
    command_started_wall_ns: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, d: Any, where: str) -> RunMeta:
        if not isinstance(d, dict) or not isinstance(d.get("schema_version"), int):
            raise ResultsError(f"{where}: not a perfkit run record (no integer schema_version)")
        texts = {k: _field(d, k, str, where) for k in _TEXT}
        maps = {k: _mapping(d, k, where) for k in _MAPS}
        workers = tuple(WorkerRecord.parse(w, where) for w in _field(d, "workers", list, where) or ())
        known = {"schema_version", "cluster", "workers", "parts", "restarts", "command_started_wall_ns", *texts, *maps}
        return cls(schema_version=d["schema_version"], **{**texts, "run_id": texts["run_id"] or Path(where).parent.name,
                                                          "status": texts["status"] or "unknown"}, **maps,
                   cluster=ClusterRecord.parse(d.get("cluster"), where), workers=workers,
                   parts=tuple(str(p) for p in _field(d, "parts", list, where) or ()),
                   restarts=tuple(_field(d, "restarts", list, where) or ()),
                   command_started_wall_ns=_field(d, "command_started_wall_ns", int, where),
                   extra={k: v for k, v in d.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": self.schema_version}
        for f in fields(self):
            if f.name in ("schema_version", "extra"):
                continue
            value = getattr(self, f.name)
            if f.name == "cluster":
                value = value.to_dict() if value != ClusterRecord() else None
            elif f.name == "workers":
                value = [w.to_dict() for w in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value if value != {} else None
        return {**out, **self.extra}

    @classmethod
    def new(cls, run_id: str, **values: Any) -> RunMeta:
        """A new run's record, before it starts: ``values`` as ``changed`` takes them."""
        return cls(SCHEMA_VERSION, run_id).changed(**values)

    def changed(self, **values: Any) -> RunMeta:
        """This record with ``values``: a field takes a value of its own type (``workers`` WorkerRecords,
        ``cluster`` a ClusterRecord, a map a dict); a key that is no field is the writer's own and goes to
        ``extra``. A value of the wrong type is the writer's bug and raises TypeError here, not in a reader."""
        names = {f.name for f in fields(self)} - {"extra"}
        own = {k: _typed(k, v) for k, v in values.items() if k in names}
        return replace(self, **own, extra={**self.extra, **{k: v for k, v in values.items() if k not in names}})

    @property
    def num_workers(self) -> int:
        n = self.cluster.num_workers
        return n if isinstance(n, int) and n > 0 else max(1, len(self.workers))

    @property
    def chief_index(self) -> int | None:
        """The chief's task index under ParameterServerStrategy (its process records the epochs)."""
        return next((w.index for w in self.workers if w.role == "chief"), None)

    def plan(self) -> FitPlan:
        """What the run's fit said of itself (steps per epoch, parameters): run.json's ``plan``, or a worker's
        (an empty plan where none said)."""
        own = self.extra.get("plan")
        if isinstance(own, dict) and own:
            return FitPlan.parse(own)
        return next((w.plan for w in self.workers if w.plan), None) or FitPlan()

    def worker(self, index: int) -> WorkerRecord | None:
        return next((w for w in self.workers if w.index == index), None)


def fit_plan(workers: Sequence[WorkerRecord]) -> dict[str, Any] | None:
    """The plan of the fit perfkit's own workers ran (the one that says its executions per epoch), as the run
    keeps it in run.json's ``plan``; None when no worker reported one."""
    return next((w.plan.to_dict() for w in workers if w.plan and w.plan.executions_per_epoch is not None), None)


def _typed(name: str, value: Any) -> Any:
    """``value`` as RunMeta's field ``name`` holds it (``RunMeta.changed``)."""
    if name == "workers":
        value = tuple(value)
        if not all(isinstance(w, WorkerRecord) for w in value):
            raise TypeError("run.json workers: WorkerRecords expected (WorkerRecord.reported builds one)")
        return value
    if name == "cluster":
        if not isinstance(value, ClusterRecord):
            raise TypeError(f"run.json cluster: a ClusterRecord expected, not {type(value).__name__}")
        return value
    if name in _MAPS:
        if value is not None and not isinstance(value, dict):
            raise TypeError(f"run.json {name}: a dict expected, not {type(value).__name__}")
        return dict(value or {})
    if name in ("parts", "restarts"):
        return tuple(value or ())
    if name in _TEXT and value is not None and not isinstance(value, str):
        raise TypeError(f"run.json {name}: text expected, not {type(value).__name__}")
    return value
