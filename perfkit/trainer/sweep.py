"""``perfkit sweep``: the scaling study. The baseline and each worker count, run as ordinary runs.

Every run is started by the caller's ``train`` (the CLI's: ``perfkit.trainer.options.train`` under its
progress display), so a sweep point is the same run ``perfkit run`` makes and ``perfkit analyze`` reads.
Repeats interleave round by round (baseline, 1, 2, 4, baseline, 1, 2, 4, ...) so that drift of the machine
is shared out among the counts instead of posing as scaling. ``sweep.json`` (``analysis/scaling.py``) is
written atomically before and after every run, so a sweep cut short keeps its finished runs and says so.

Two kinds of point: plain local workers on the whole machine (``--workers N`` of ``perfkit run``, against
the single-mode baseline), or a scale model (``--cores-per-worker C``): N emulated hosts of C cores with one
worker each, held to their budgets as ``perfkit run --cluster FILE --emulate`` holds them, against one such
host (the one-worker point is the scale model's single machine).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from perfkit.analysis.scaling import BASELINE, POINT, SweepRecord, SweepRun, run_plan
from perfkit.cluster import ClusterSpec, HostSpec, check_mode
from perfkit.config import Mode, RunConfig, sanitize_id
from perfkit.errors import PerfkitError, RunInterrupted, UsageError
from perfkit.results import load_meta, utc_now
from perfkit.trainer.hosts.cpubudget import available_cores
from perfkit.trainer.multi import MultiOptions

Train = Callable[[RunConfig, "MultiOptions | None", str], Path]  # (config, cluster, run id) -> run directory
SCALINGS = ("strong", "weak")


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep runs, checked before anything starts (``plan``)."""

    counts: tuple[int, ...]  # ascending; with a scale model, 1 is always among them (the reference)
    repeats: int
    scaling: str  # strong: the global batch kept (the article); weak: the per-worker batch kept
    cores_per_worker: float | None  # None: plain local workers

    @property
    def reference(self) -> str:
        return POINT if self.cores_per_worker is not None else BASELINE


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
         machine_cores: float | None = None) -> SweepPlan:
    """The sweep's plan; every count's configuration and cluster checked now (a one-line ``UsageError``)."""
    counts = parse_counts(counts_text)
    if repeats < 1:
        raise UsageError(f"--repeats: {repeats}: must be at least 1")
    if scaling not in SCALINGS:
        raise UsageError(f"--scaling: {scaling!r}: choose strong (the global batch kept) or weak (the per-worker "
                         f"batch kept)")
    if cores_per_worker is not None:
        cores = float(len(available_cores())) if machine_cores is None else machine_cores
        if not cores_per_worker > 0:
            raise UsageError(f"--cores-per-worker: {cores_per_worker:g}: must be > 0")
        if cores_per_worker * max(counts) > cores + 1e-9:
            raise UsageError(f"--cores-per-worker: {cores_per_worker:g} x {max(counts)} workers = "
                             f"{cores_per_worker * max(counts):g} cores, more than this machine's {cores:g}")
        counts = tuple(sorted(set(counts) | {1}))  # one host of C cores: the scale model's single machine
    p = SweepPlan(counts, repeats, scaling, cores_per_worker)
    for n in counts:
        if scaling == "strong" and cfg.batch_size % n:
            raise UsageError(f"--workers: the global batch {cfg.batch_size} does not divide among {n} workers "
                             f"(strong scaling keeps it); give counts that divide it, or --scaling weak")
        try:
            config_for(cfg, p, n)  # weak scaling's larger batch must fit the data (RunConfig checks it)
        except UsageError as exc:
            raise UsageError(f"--scaling weak, {n} workers (global batch {cfg.batch_size} x {n}): {exc}") from None
        if cores_per_worker is not None:
            check_mode(emulated_cluster(n, cores_per_worker), "multi", cores=cores)
    return p


def config_for(cfg: RunConfig, p: SweepPlan, n: int | None) -> RunConfig:
    """The configuration of ``n`` workers (None: the single-mode baseline)."""
    if n is None:
        return replace(cfg, mode=Mode.single)
    batch = cfg.batch_size * n if p.scaling == "weak" else cfg.batch_size
    return replace(cfg, mode=Mode.multi, batch_size=batch)


def emulated_cluster(n: int, cores: float) -> ClusterSpec:
    """N emulated hosts of ``cores`` each, one worker apiece, as a cluster file of N ``[[hosts]]`` would say."""
    hosts = tuple(HostSpec(f"h{i}", f"127.0.0.{i + 1}", float(cores), 1, 20000) for i in range(n))
    return ClusterSpec(hosts, source=f"--cores-per-worker {cores:g}")


def options_for(p: SweepPlan, n: int, pin: bool, allow_unenforced: bool,
                connect_timeout: float = 120.0) -> MultiOptions:
    """The cluster of ``n`` workers: emulated hosts (a scale model) or local workers (``--workers N``)."""
    from perfkit.trainer.options import multi_options

    if p.cores_per_worker is None:
        opts = multi_options(n, None, None, None, False, pin, connect_timeout, 0)
        return replace(opts, allow_unenforced=allow_unenforced)
    spec = emulated_cluster(n, p.cores_per_worker)
    return MultiOptions(spec, tuple(t.index for t in spec.tasks), None, True, pin, connect_timeout, 0,
                        allow_unenforced=allow_unenforced)


def new_record(cfg: RunConfig, p: SweepPlan, sweep_id: str) -> SweepRecord:
    return SweepRecord(sweep_id, p.counts, p.repeats, p.scaling, p.cores_per_worker, cfg.preset, cfg.batch_size,
                       p.reference, utc_now())


def sweep(cfg: RunConfig, p: SweepPlan, results_dir: Path, train: Train, options: Callable[[int], MultiOptions],
          say: Callable[[str], None], stamp: str) -> Path:
    """Run the sweep; returns its directory (``results_dir/sweep-<stamp>[-label]``, holding sweep.json)."""
    sweep_id = "-".join(x for x in ("sweep", stamp, sanitize_id(cfg.label, "--label") if cfg.label else "") if x)
    sweep_dir = Path(results_dir) / sweep_id
    if sweep_dir.exists():
        raise UsageError(f"{sweep_dir}: exists already; a sweep starts a new directory")
    record = new_record(cfg, p, sweep_id)
    record.save(sweep_dir)
    order = ([None] if p.reference == BASELINE else []) + list(p.counts)
    total = p.repeats * len(order)
    for round_ in range(1, p.repeats + 1):
        for k, n in enumerate(order):
            what = "the single-machine baseline" if n is None else f"{n} worker{'s' if n > 1 else ''}"
            say(f"[{(round_ - 1) * len(order) + k + 1}/{total}] round {round_}: {what}")
            record = _one(record, sweep_dir, cfg, p, n, round_, stamp, train, options)
    record = replace(record, status="complete" if any(r.status == "complete" for r in record.runs) else "failed",
                     ended=utc_now())
    record.save(sweep_dir)
    return sweep_dir


def _one(record: SweepRecord, sweep_dir: Path, cfg: RunConfig, p: SweepPlan, n: int | None, round_: int, stamp: str,
         train: Train, options: Callable[[int], MultiOptions]) -> SweepRecord:
    """One run of the sweep, recorded before it starts and after it ends; a failed run is recorded and the
    sweep goes on, an interrupted one ends the sweep (its record says so)."""
    c = config_for(cfg, p, n)
    run_id = f"{stamp}-{c.mode.value}-sweep-r{round_}-{'base' if n is None else f'n{n}'}"
    entry = SweepRun(run_id, round_, BASELINE if n is None else POINT, 1 if n is None else n)
    record = record.with_run(entry)
    record.save(sweep_dir)
    try:
        path = train(c, None if n is None else options(n), run_id)
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
    if record.gradient_bytes is None:
        record = replace(record, gradient_bytes=_gradient_bytes(path))
    record.save(sweep_dir)
    return record


def _gradient_bytes(run: Path) -> float | None:
    """The model's parameters as float32 gradient bytes (what each step all-reduces), from run.json's plan."""
    try:
        params = run_plan(load_meta(run)).get("params")
    except PerfkitError:
        return None
    return float(params) * 4 if params else None
