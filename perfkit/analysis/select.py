"""Which runs are compared: the baseline, and the runs left out (with the reason).

Baseline (docs/figures.md): the latest complete single-mode run on the same data and preset (for a launched
parameter-server script without one, its latest ``--mode ps`` run with one worker), unless
``--baseline RUN_ID`` names one. "Same" is judged against the latest complete multi-mode run analysed
that has such a run (else the latest multi-mode run, or the latest run when none is multi-mode); a
baseline missing from the analysed runs is looked up in the results directory. Runs that are not
complete, miss files or workers, or ran another dataset or preset than the baseline are left out with
their reason; nothing is computed from them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from perfkit.analysis.load import Excluded, LoadedRun, find_run, load_runs
from perfkit.errors import UsageError
from perfkit.results import RunMeta
from perfkit.workloads import BUILTIN


@dataclass(frozen=True)
class Selection:
    runs: tuple[LoadedRun, ...]  # analysed, baseline first, then oldest first
    baseline: LoadedRun | None
    baseline_note: str  # how the baseline was chosen, or why there is none
    excluded: tuple[Excluded, ...]
    warnings: tuple[str, ...]


def dataset(meta: RunMeta) -> tuple[Any, ...]:
    """What a run trained on: for the bot detector, the file (generated or the user's) and the train/test
    split; for a user's workload, its name, version and data/size parameters (perfkit/workloads)."""
    wl = meta.workload
    if wl.get("name") not in (None, BUILTIN):
        params = json.dumps(wl.get("params") or {}, sort_keys=True, default=str)
        return ("workload", wl.get("name"), wl.get("version"), params, None, None)
    data, cfg = meta.data, meta.config
    # The bot detector's parameters: in the config's ``params``, or (recorded before they moved) beside it.
    own = {**cfg, **(cfg.get("params") or {})}
    name = Path(str(data.get("path") or own.get("data_path") or "")).name
    # Single mode says how it got the generated file ("generated" now or from the "cache"), the launcher
    # says "generated" for both; a user's file is "file" or "user". Only the kind of data matters here.
    kind = "user" if data.get("source") in ("file", "user") else "synthetic"
    return (kind, name, own.get("train_players"), own.get("test_players"),
            own.get("sequence_length"), cfg.get("seed"))


def workload(meta: RunMeta) -> tuple[Any, ...]:
    return (meta.preset, *dataset(meta))


def describe_data(meta: RunMeta) -> str:
    return describe_dataset(dataset(meta))


def describe_dataset(key: tuple[Any, ...]) -> str:
    """``dataset()``'s tuple in words."""
    source, name, train, test, length, seed = key
    if source == "workload" and name == "command":  # a launched command (perfkit launch, perfkit.record)
        return f"command {json.loads(test).get('command')!r}"
    if source == "workload":
        return f"workload {name} {train} ({test})"
    return f"{name or source} ({train}/{test} players, {length} days, seed {seed})"


def _usable(run: LoadedRun) -> bool:
    return not run.problems


def choose_baseline(runs: Sequence[LoadedRun], results_dir: Path, baseline_id: str | None
                    ) -> tuple[LoadedRun | None, str]:
    if baseline_id:
        return _named_baseline(runs, results_dir, baseline_id), "named by --baseline"
    usable = sorted((r for r in runs if _usable(r)), key=lambda r: r.sort_key)
    if not usable:
        return None, "no complete run to compare"
    references = [r for r in usable if r.mode in ("multi", "ps")][::-1] or usable[::-1]
    for kind in BaselineKind:  # a single-mode run first, wherever one is
        for ref in references:  # the latest cluster run (multi or ps) that has a baseline among the runs analysed
            candidates = [r for r in usable if baseline_kind(r.meta) is kind and workload(r.meta) == workload(ref.meta)]
            if candidates:
                return candidates[-1], kind.value
    key = workload(references[0].meta)
    scanned = sorted((r for r in _scan_baselines(results_dir, key) if _usable(r)), key=lambda r: r.sort_key)
    for kind in BaselineKind:
        candidates = [r for r in scanned if baseline_kind(r.meta) is kind]
        if candidates:
            return candidates[-1], kind.value
    what = f"preset {key[0]}, " if key[0] is not None else ""
    also = " or --mode ps run with one worker" if references[0].mode == "ps" and _command(references[0].meta) else ""
    return None, (f"no complete single-mode run{also} on the same data and preset ({what}"
                  f"{describe_data(references[0].meta)})")


class BaselineKind(Enum):
    """What a baseline can be, in the order one is looked for; the value says how it was chosen."""

    SINGLE = "latest complete single-mode run on the same data and preset"
    PS_ONE_WORKER = ("latest complete --mode ps run of the same command with one worker (a parameter-server "
                     "script runs only in its cluster)")


def baseline_kind(meta: RunMeta) -> BaselineKind | None:
    """A single-mode run of one replica; for a launched command also a ``--mode ps`` run with one worker."""
    if meta.mode == "single" and one_replica(meta):
        return BaselineKind.SINGLE
    if meta.mode == "ps" and _command(meta) and meta.num_workers == 1:
        return BaselineKind.PS_ONE_WORKER
    return None


def _command(meta: RunMeta) -> bool:
    return meta.workload.get("name") == "command"


def one_replica(meta: RunMeta) -> bool:
    """A baseline trains as one replica: a ``--replicas N`` run is a point of a scaling study, not one."""
    return int(meta.config.get("replicas") or 1) == 1


def _scan_baselines(results_dir: Path, key: tuple[Any, ...]) -> list[LoadedRun]:
    from perfkit.results import iter_run_dirs, load_meta

    ids = []
    for d in iter_run_dirs(results_dir):
        try:
            meta = load_meta(d)
        except Exception:  # noqa: BLE001 - an unreadable directory is simply not a candidate
            continue
        if baseline_kind(meta) is not None and meta.status == "complete" and workload(meta) == key:
            ids.append(meta.run_id)
    found = [find_run(results_dir, rid) for rid in sorted(set(ids))]
    return [r for r in found if r is not None]


def _named_baseline(runs: Sequence[LoadedRun], results_dir: Path, baseline_id: str) -> LoadedRun:
    run = next((r for r in runs if r.run_id == baseline_id), None) or find_run(results_dir, baseline_id)
    if run is None:
        raise UsageError(f"--baseline: no run {baseline_id} among the runs analysed or in {results_dir}")
    if run.problems:
        raise UsageError(f"--baseline: run {baseline_id} cannot be the baseline: {run.problems[0]}")
    return run


def select(runs: Sequence[LoadedRun], excluded: Sequence[Excluded], results_dir: Path,
           baseline_id: str | None) -> Selection:
    baseline, note = choose_baseline(runs, results_dir, baseline_id)
    pool = list(runs) + ([baseline] if baseline and all(r.run_id != baseline.run_id for r in runs) else [])
    usable = [r for r in pool if _usable(r)]
    key = workload(baseline.meta) if baseline else (workload(max(usable, key=lambda r: r.sort_key).meta)
                                                     if usable else None)
    kept, left_out, warnings = [], list(excluded), []
    for run in sorted(pool, key=lambda r: r.sort_key):
        reason = "; ".join(run.problems) or _mismatch(run.meta, baseline.meta if baseline else None, key)
        if reason:
            left_out.append(Excluded(run.run_id, ", ".join(str(p) for p in run.paths), reason))
            continue
        kept.append(run)
        warnings += [f"{run.run_id}: {w}" for w in run.warnings]
        if baseline is not None and run is not baseline:
            warnings += [f"{run.run_id}: {w}" for w in _config_notes(run.meta, baseline.meta)]
    if baseline is not None:
        kept.sort(key=lambda r: r is not baseline)
    return Selection(tuple(kept), baseline, note, tuple(left_out), tuple(warnings))


def _mismatch(meta: RunMeta, base: RunMeta | None, key: tuple[Any, ...] | None) -> str:
    if key is None or workload(meta) == key:
        return ""
    whose = "the baseline's" if base is not None else "the latest run's"
    if meta.preset != key[0]:
        return f"preset {meta.preset}, not {whose} {key[0]}"
    return f"dataset {describe_data(meta)}, not {whose} {describe_dataset(key[1:])}"


def _config_notes(meta: RunMeta, base: RunMeta) -> list[str]:
    cfg, ref = meta.config, base.config
    return [f"{name.replace('_', ' ')} {cfg.get(name)} differs from the baseline's {ref.get(name)}"
            for name in ("batch_size", "epochs") if cfg.get(name) != ref.get(name)]


def load_and_select(paths: Sequence[Path] | None, results_dir: Path, baseline_id: str | None) -> Selection:
    loaded = load_runs(paths, results_dir)
    if not loaded.runs and not loaded.excluded:
        raise UsageError(f"no perfkit runs in {results_dir}" if not paths else "no runs to analyse")
    return select(loaded.runs, loaded.excluded, results_dir, baseline_id)
