"""``perfkit sweep``: the scaling study. The baseline and each worker count, run as ordinary runs.

Every run is started by the caller's ``train`` (the CLI's: ``perfkit.trainer.options.train`` under its
progress display), so a sweep point is the same run ``perfkit run`` makes and ``perfkit analyze`` reads.
Repeats interleave round by round, each round's order turned one place (baseline, 1, 2, 4; 1, 2, 4,
baseline; ...: ``studies/rounds.py``) so that drift of the machine is shared out among the counts instead of posing
as scaling. ``sweep.json`` (``analysis/scaling/study.py``) is
written atomically before and after every run, so a sweep cut short keeps its finished runs and says so.

Two kinds of point: plain local workers on the whole machine (``--workers N`` of ``perfkit run``, against
the single-mode baseline), or a scale model (``--cores-per-worker C``): N emulated hosts of C cores with one
worker each, held to their budgets as ``perfkit run --cluster FILE --emulate`` holds them, against one such
host (the one-worker point is the scale model's single machine).

A strong-scaling scale model also runs **probes**: one worker on one such host at the per-worker batch of a
count N (the global batch / N), a short run (``PROBE_STEPS`` steps an epoch, two epochs), for every count run
and every count to be forecast: a worker's compute is not smooth in its share of the batch (a batch half as
large can cost far more or far less than half), so the forecast measures it at each count instead of drawing
a curve through the fitted counts (docs/scaling.md, "The model").

Three ways to scale each count N (``--ways``, docs/scaling.md): ``replicas`` (``--mode single --replicas N``:
MirroredStrategy over N logical CPU devices of this process), ``workers`` (N MultiWorkerMirrored worker
processes) and ``ps`` (``--mode ps``: N workers, one parameter server and the chief).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from perfkit.analysis.scaling.study import BASELINE, POINT, PROBE, SweepRecord, SweepRun
from perfkit.cluster import ClusterSpec, HostSpec, check_mode
from perfkit.config import Mode, RunConfig, sanitize_id
from perfkit.errors import PerfkitError, RunInterrupted, UsageError
from perfkit.results import load_meta, utc_now
from perfkit.studies.rounds import rounds
from perfkit.trainer.hosts.cpubudget import available_cores
from perfkit.trainer.multi import MultiOptions
from perfkit.workloads import checked
from perfkit.workloads.botdetector.params import configure

TrainRun = Callable[[RunConfig, "MultiOptions | None", str], Path]  # (config, cluster, its run id) -> run directory
Options = Callable[[int, str], "MultiOptions | None"]  # (count, way) -> its cluster (None: in this process)
SCALINGS = ("strong", "weak")
WAYS = ("replicas", "workers", "ps")
# A probe's steps an epoch: its second epoch is the steady one measured (the first builds the graph), so a
# few dozen steps in all; the mean of 12 is within sd/sqrt(12) of the probe's pace, where a step's spread
# (clean_step_cv of the sweep's runs) was 2-15% of a step as measured (benchmarks/measurements)
PROBE_STEPS = 12


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep runs, checked before anything starts (``plan``)."""

    counts: tuple[int, ...]  # ascending; with a scale model, 1 is always among them (the reference)
    repeats: int
    scaling: str  # strong: the global batch kept (the article); weak: the per-worker batch kept
    cores_per_worker: float | None  # None: plain local workers
    ways: tuple[str, ...] = ("workers",)  # in WAYS order
    probes: tuple[int, ...] = ()  # counts whose per-worker batch one worker is probed at (``probe_counts``)

    @property
    def reference(self) -> str:
        return POINT if self.cores_per_worker is not None else BASELINE

    def order(self) -> list[tuple[int | None, str | None]]:
        """One round's runs, (count, way); (None, None): the baseline. Replicas at 1 are the baseline itself
        (one process, one device): not run twice. A scale model's one-worker point is its reference: run
        whatever the ways."""
        first: list[tuple[int | None, str | None]] = [(None, None)] if self.reference == BASELINE else []
        if self.reference == POINT and "workers" not in self.ways:
            first.append((1, "workers"))
        points = [(n, w) for n in self.counts for w in self.ways if not (w == "replicas" and n == 1)]
        return first + points + [(n, PROBE) for n in self.probes]


def probe_counts(counts: tuple[int, ...], targets: tuple[int, ...], batch: int, scaling: str,
                 cores_per_worker: float | None, ways: tuple[str, ...]) -> tuple[int, ...]:
    """The counts a strong-scaling scale model probes: every count run or forecast whose share of the global
    batch is whole (weak scaling keeps one per-worker batch; local workers share the machine, so one worker
    alone does not run as each of them does; replicas and ps are not what the model forecasts)."""
    if scaling != "strong" or cores_per_worker is None or "workers" not in ways:
        return ()
    return tuple(sorted(n for n in set(counts) | set(targets) if batch % n == 0))


def parse_ways(text: str) -> tuple[str, ...]:
    """``replicas,workers,ps`` -> the ways in WAYS order; a one-line error for anything else."""
    given = [w.strip().lower() for w in str(text).split(",")]
    bad = [w for w in given if w not in WAYS]
    if bad or len(set(given)) < len(given):
        why = f"{bad[0]!r} is not a way" if bad else "a way is listed more than once"
        raise UsageError(f"--ways: {text!r}: {why}; choose from {', '.join(WAYS)}, comma-separated")
    return tuple(w for w in WAYS if w in given)


def parse_counts(text: str) -> tuple[int, ...]:
    """``1,2,4`` -> (1, 2, 4); a one-line error for anything but distinct whole numbers >= 1."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(not p.lstrip("+").isdigit() for p in parts):
        raise UsageError(f"--workers: {text!r} is not a comma-separated list of whole numbers (e.g. 1,2,4)")
    counts = [int(p) for p in parts]
    if any(n < 1 for n in counts):
        raise UsageError(f"--workers: {text!r}: a worker count must be at least 1")
    if len(set(counts)) < len(counts):
        raise UsageError(f"--workers: {text!r} lists a count more than once")
    return tuple(sorted(counts))


def plan(cfg: RunConfig, counts_text: str, repeats: int, scaling: str, cores_per_worker: float | None,
         machine_cores: float | None = None, ways: str = "workers", targets: tuple[int, ...] = ()) -> SweepPlan:
    """The sweep's plan; every count's configuration and cluster checked now (a one-line ``UsageError``).
    ``targets``: the counts to be forecast (their probes are planned too)."""
    counts, chosen = parse_counts(counts_text), parse_ways(ways)
    if repeats < 1:
        raise UsageError(f"--repeats: {repeats}: must be at least 1")
    if scaling not in SCALINGS:
        raise UsageError(f"--scaling: {scaling!r}: choose strong (the global batch kept) or weak (the per-worker "
                         f"batch kept)")
    cores = float(len(available_cores())) if machine_cores is None else machine_cores
    if cores_per_worker is not None:
        if "replicas" in chosen:
            raise UsageError("--ways replicas: not with --cores-per-worker (the replicas run in perfkit's own "
                             "process on the whole machine; a scale model's emulated hosts hold worker processes)")
        if not cores_per_worker > 0:
            raise UsageError(f"--cores-per-worker: {cores_per_worker:g}: must be > 0")
        if cores_per_worker * max(counts) > cores + 1e-9:
            raise UsageError(f"--cores-per-worker: {cores_per_worker:g} x {max(counts)} workers = "
                             f"{cores_per_worker * max(counts):g} cores, more than this machine's {cores:g}")
        counts = tuple(sorted(set(counts) | {1}))  # one host of C cores: the scale model's single machine
    probes = probe_counts(counts, targets, cfg.batch_size, scaling, cores_per_worker, chosen)
    p = SweepPlan(counts, repeats, scaling, cores_per_worker, chosen, probes)
    for n, way in p.order():
        if n is not None and way is not None:
            _check_point(cfg, p, n, way, cores)
    return p


def _check_point(cfg: RunConfig, p: SweepPlan, n: int, way: str, cores: float) -> None:
    if p.scaling == "strong" and way not in ("ps", PROBE) and cfg.batch_size % n:
        raise UsageError(f"--workers: the global batch {cfg.batch_size} does not divide among {n} {way} (strong "
                         f"scaling keeps it); give counts that divide it, or --scaling weak")
    try:  # weak scaling's larger batch must fit the data
        checked(config_for(cfg, p, n, way))
    except UsageError as exc:
        raise UsageError(f"--scaling weak, {n} {way} (global batch {cfg.batch_size} x {n}): {exc}") from None
    if p.cores_per_worker is not None:
        check_mode(emulated_cluster(1 if way == PROBE else n, p.cores_per_worker, ps=way == "ps"),
                   "ps" if way == "ps" else "multi", cores=cores)


def config_for(cfg: RunConfig, p: SweepPlan, n: int | None, way: str = "workers") -> RunConfig:
    """The configuration of ``n`` replicas, workers or ps workers (None: the single-mode baseline). A ps worker
    takes a whole global batch a step (trainer/worker/ps.py), so its batch is the same under weak scaling."""
    if n is None:
        return replace(cfg, mode=Mode.single)
    batch = cfg.batch_size * n if p.scaling == "weak" and way != "ps" else cfg.batch_size
    if way == "replicas":
        return replace(cfg, mode=Mode.single, batch_size=batch, replicas=n)
    if way == "ps":  # as perfkit run --mode ps: no trace window (each worker's steps are timed in the step)
        return replace(cfg, mode=Mode.ps, batch_size=batch, profile_steps="off")
    if way == PROBE:  # one worker at a count's share of the batch: its step is all compute, so no trace
        share = cfg.batch_size // n
        probe = replace(cfg, mode=Mode.multi, batch_size=share, epochs=2, profile_steps="off")
        return configure(probe, train_players=share * PROBE_STEPS, test_players=share)
    return replace(cfg, mode=Mode.multi, batch_size=batch)


def emulated_cluster(n: int, cores: float, ps: bool = False) -> ClusterSpec:
    """N emulated hosts of ``cores`` each, one worker apiece, as a cluster file of N ``[[hosts]]`` would say;
    ``ps``: the parameter server and the chief on the first host, inside its budget (as
    examples/blog-cluster-ps.toml puts them beside workers), so every way runs on the same cores."""
    hosts = tuple(HostSpec(f"h{i}", f"127.0.0.{i + 1}", float(cores), 1, 20000, ps=int(ps and i == 0),
                           chief=ps and i == 0) for i in range(n))
    return ClusterSpec(hosts, source=f"--cores-per-worker {cores:g}")


def options_for(p: SweepPlan, n: int, pin: bool, allow_unenforced: bool, way: str = "workers",
                connect_timeout: float = 120.0) -> MultiOptions | None:
    """The cluster of ``n`` workers: emulated hosts (a scale model) or local workers (``--workers N``); with
    ``way`` ps, one parameter server and the chief besides; replicas: None (they run in this process)."""
    from perfkit.trainer.options import ClusterFlags, multi_options

    if way == "replicas":
        return None
    if way == PROBE:  # one host of the scale model, as its one-worker point
        n, way = 1, "workers"
    mode = Mode.ps if way == "ps" else Mode.multi
    if p.cores_per_worker is None:
        opts = multi_options(ClusterFlags(workers=n, pin=pin, connect_timeout=connect_timeout,
                                          ps=1 if way == "ps" else None), mode)
        return replace(opts, allow_unenforced=allow_unenforced)
    spec = emulated_cluster(n, p.cores_per_worker, ps=way == "ps")
    return MultiOptions(spec, tuple(t.index for t in spec.tasks), None, True, pin, connect_timeout, 0,
                        allow_unenforced=allow_unenforced)


def new_record(cfg: RunConfig, p: SweepPlan, sweep_id: str) -> SweepRecord:
    return SweepRecord(sweep_id, p.counts, p.repeats, p.scaling, p.cores_per_worker, cfg.preset, cfg.batch_size,
                       p.reference, utc_now(), ways=p.ways)


def sweep(cfg: RunConfig, p: SweepPlan, results_dir: Path, train: TrainRun, options: Options,
          say: Callable[[str], None], stamp: str, split_cpu: Callable[[int], int] | None = None) -> Path:
    """Run the sweep; returns its directory (``results_dir/sweep-<stamp>[-label]``, holding sweep.json).
    ``split_cpu``: sets this process's logical CPU devices up before TensorFlow fixes them (default:
    ``strategy.split_cpu``), once, for the largest replica count: every replicas run of the sweep, and the
    baseline, run in this process."""
    sweep_id = "-".join(x for x in ("sweep", stamp, sanitize_id(cfg.label, "--label") if cfg.label else "") if x)
    sweep_dir = Path(results_dir) / sweep_id
    if sweep_dir.exists():
        raise UsageError(f"{sweep_dir}: exists already; a sweep starts a new directory")
    replicas = [n for n, way in p.order() if way == "replicas" and n is not None]
    if replicas:
        (split_cpu or _split_cpu)(max(replicas))
    record = new_record(cfg, p, sweep_id)
    record.save(sweep_dir)
    order = p.order()
    total = p.repeats * len(order)
    for k, (r, (n, way)) in enumerate(rounds(order, p.repeats)):
        say(f"[{k + 1}/{total}] round {r + 1}: {_what(n, way)}")
        record = _one(record, sweep_dir, cfg, p, n, way, r + 1, stamp, train, options)
    record = replace(record, status="complete" if any(r.status == "complete" for r in record.runs) else "failed",
                     ended=utc_now())
    record.save(sweep_dir)
    return sweep_dir


def _split_cpu(n: int) -> int:
    from perfkit.trainer.worker.strategy import split_cpu

    return split_cpu(n)


def _what(n: int | None, way: str | None) -> str:
    if n is None or way is None:
        return "the single-machine baseline"
    s = "s" if n > 1 else ""
    return {"replicas": f"{n} replicas in one process", "ps": f"{n} worker{s} + 1 parameter server",
            PROBE: f"one worker at the per-worker batch of {n} (a probe)"}.get(way, f"{n} worker{s}")


def _one(record: SweepRecord, sweep_dir: Path, cfg: RunConfig, p: SweepPlan, n: int | None, way: str | None,
         round_: int, stamp: str, train: TrainRun, options: Options) -> SweepRecord:
    """One run of the sweep, recorded before it starts and after it ends; a failed run is recorded and the
    sweep goes on, an interrupted one ends the sweep (its record says so)."""
    c = config_for(cfg, p, n, way or "workers")
    tag = "base" if n is None else f"n{n}" if way == "workers" else f"{way}{n}"
    run_id = f"{stamp}-{c.mode.value}-sweep-r{round_}-{tag}"
    role = BASELINE if n is None else PROBE if way == PROBE else POINT
    entry = SweepRun(run_id, round_, role, 1 if n is None else n, way=None if way == PROBE else way)
    record = record.with_run(entry)
    record.save(sweep_dir)
    try:
        path = train(c, None if n is None or way == "replicas" else options(n, way or "workers"), run_id)
    except (KeyboardInterrupt, RunInterrupted) as exc:
        why = str(exc).splitlines()[0] if str(exc) else "interrupted by the user"
        stopped = replace(record.with_run(replace(entry, status="interrupted", error=why)), status="interrupted",
                          ended=utc_now())
        stopped.save(sweep_dir)
        raise
    except PerfkitError as exc:
        record = record.with_run(replace(entry, status="failed", error=str(exc).splitlines()[0]))
        record.save(sweep_dir)
        return record
    record = record.with_run(replace(entry, status="complete"))
    if record.gradient_bytes is None and role != PROBE:
        record = replace(record, gradient_bytes=_gradient_bytes(path))
    record.save(sweep_dir)
    return record


def _gradient_bytes(run: Path) -> float | None:
    """The model's parameters as float32 gradient bytes (what each step all-reduces), from run.json's plan."""
    try:
        params = load_meta(run).plan().params
    except PerfkitError:
        return None
    return float(params) * 4 if params else None
