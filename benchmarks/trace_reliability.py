"""How often a multi-worker run keeps every worker's profiler trace (TF 2.21's profiler crash).

N back-to-back ``perfkit run --mode multi --workers W`` runs per arm and worker count (the quick preset's
60,000 / 15,000 players, 2 epochs: 58 steps an epoch, the window in epoch 2; ``--players`` for others),
counting the runs in which every worker's final capture is ``captured`` and parses into traced steps.
Smaller data crash less often (0 of 12 two-worker runs at 16,384 players), so the default is the size the
README's first command trains. Arms:

- ``in-process`` (the default launch): ``tf.profiler.experimental.start/stop`` from the Keras callback,
  with freed memory poisoned while the profiler stops (``tracewindow.freed_memory_poisoned``); a worker killed
  inside the capture restarts the cluster from the last completed epoch and the window is traced again,
  up to ``--profile-retries`` times. The first attempt of each run is exactly the launch without retries,
  so the same runs also give that arm's rate ("first attempt").
- ``unguarded``: the same without the poisoning (``PERFKIT_PROFILER_POISON=0``): TF's stop as it is.
- ``epoch-end``: the window is the last 10 steps of epoch 2, so the profiler stops at the epoch's end
  before validation, with no training step in flight; no retries, no poisoning.

Per run it also records how many captures TF's profiler crashed, with which signal, and the tracing
overhead: the median step time of the traced steps over that of the untraced steps of the same epoch.

``--clusters FILE,...`` adds rows for emulated clusters (half as many runs each): the README's first
command runs ``examples/blog-cluster.toml``, whose 0.4-core host is throttled by a CPU quota.

    python -m benchmarks trace-reliability --runs 20 --workers 2,4 --clusters examples/blog-cluster.toml
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks._common import (
    PERFKIT,
    Report,
    conclude,
    env_with_repo,
    finish_args,
    fmt,
    heading,
    make_parser,
    markdown_table,
    progress,
    run_measured,
)
from benchmarks._runs import printed_run_dir, runs_dir
from perfkit.config import RunConfig
from perfkit.profiler.tracewindow import AUTO_LENGTH

NAME = "trace-reliability"
BATCH = 1024
EPOCHS = 2
DEFAULT_RETRIES = int(RunConfig.__dataclass_fields__["profile_retries"].default)
TARGET = 0.95


def size_args(train: int, test: int) -> list[str]:
    return ["--preset", "quick", "--train-players", str(train), "--test-players", str(test), "--epochs", str(EPOCHS)]


ARMS = ("in-process", "unguarded", "epoch-end")


def arm_env(arm: str) -> dict[str, str]:
    """The arm's environment: ``unguarded`` stops the profiler without poisoning freed memory."""
    from perfkit.profiler.tracewindow import POISON_ENV

    env = env_with_repo()
    env.pop(POISON_ENV, None)
    return {**env, POISON_ENV: "0"} if arm in ("unguarded", "epoch-end") else env


def arm_args(arm: str, retries: int, steps_per_epoch: int) -> list[str]:
    if arm in ("in-process", "unguarded"):
        return ["--profile-retries", str(retries)]
    if arm == "epoch-end":
        last = EPOCHS * steps_per_epoch
        return ["--profile-steps", f"{last - 9}-{last}", "--profile-retries", "0"]
    raise SystemExit(f"--arms: unknown arm {arm!r}; choose from {', '.join(ARMS)}")


def one_run(label: str, args: list[str], root: Path, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    proc = run_measured([*PERFKIT, "run", "--mode", "multi", *args, "--results-dir", str(root), "--quiet"],
                        timeout, env=env)
    run_dir = printed_run_dir(proc)
    out: dict[str, Any] = {"label": label, "wall_s": proc.wall_s, "run_dir": str(run_dir) if run_dir else None}
    if run_dir is None:
        return {**out, "error": proc.error() or "perfkit run printed no run directory", "complete": False}
    return {**out, **outcome(run_dir)}


def outcome(run_dir: Path) -> dict[str, Any]:
    """What one run kept: every worker's capture parsed, crashes on the way, tracing overhead."""
    from perfkit.profiler import xplane

    meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    crashes = [r for r in meta.get("restarts") or [] if r.get("profiler_crash")]
    workers = (meta.get("profile") or {}).get("workers") or {}
    n = int((meta.get("cluster") or {}).get("num_workers") or 0)
    parsed, errors = {}, []
    for k, entry in workers.items():
        if entry.get("status") == "captured" and entry.get("file"):
            try:
                parsed[k] = xplane.parse(run_dir / entry["file"]).steps
            except xplane.XPlaneError as exc:
                errors.append(str(exc))
    keys = [set(map(tuple, df[["epoch", "step"]].values.tolist())) for df in parsed.values()]
    complete = meta.get("status") == "complete" and len(parsed) == n > 0 and all(k and k == keys[0] for k in keys)
    spe = int(((meta.get("config") or {}).get("params") or {}).get("train_players", 0)) // BATCH
    return {"status": meta.get("status"), "complete": bool(complete), "crashes": len(crashes),
            "first_attempt_complete": bool(complete and not crashes),
            "signals": [r.get("after", "").rsplit(" ", 1)[-1] for r in crashes],
            "overhead": _overhead(run_dir, workers, spe), "parse_errors": errors, "error": meta.get("error")}


def _overhead(run_dir: Path, workers: dict[str, Any], steps_per_epoch: int) -> float | None:
    """Median over workers of (median traced step) / (median untraced step of the same epoch)."""
    import pandas as pd

    ratios = []
    for k, entry in workers.items():
        window, path = entry.get("window") or {}, run_dir / "workers" / k / "steps.parquet"
        if entry.get("status") != "captured" or not window or not path.is_file():
            continue
        df = pd.read_parquet(path)
        df = df[df["attempt"] == entry.get("attempt", df["attempt"].max())]
        g = df.assign(glob=df["epoch"] * steps_per_epoch + df["step"] + 1)
        inside = g["glob"].between(window["first"], window["last"])
        same = g["epoch"].isin(g.loc[inside, "epoch"]) & ~inside & (g["step"] > 1)  # first steps run cold
        if inside.any() and same.any():
            ratios.append(float(g.loc[inside, "duration_s"].median() / g.loc[same, "duration_s"].median()))
    return statistics.median(ratios) if ratios else None


def measure(args: argparse.Namespace) -> Report:
    size = size_args(*args.players)
    report = Report(NAME, {"repeats": 1, "runs": args.runs, "workers": args.workers, "arms": args.arms,
                           "profile_retries": args.profile_retries, "size": " ".join(size)})
    report.targets = {"complete_share_min": TARGET}
    root = runs_dir(args.results_root, NAME, args.stamp)
    launches = [(f"{w}w", str(w), ["--workers", str(w)]) for w in args.workers]
    launches += [(Path(c).stem, Path(c).stem, ["--cluster", str(c)]) for c in args.clusters]
    for arm in args.arms:
        for key, shown, launch in launches:
            n = args.runs if launch == ["--workers", "2"] else max(1, args.runs // 2)
            runs = []
            for i in range(n):
                progress(f"{arm} {key}, run {i + 1}/{n}")
                extra = arm_args(arm, args.profile_retries, args.players[0] // BATCH)
                runs.append(one_run(f"{arm} {key} #{i + 1}", [*launch, *size, *extra], root, args.timeout,
                                    arm_env(arm)))
            report.results[f"{arm} {key}"] = {"arm": arm, "workers": shown, "runs": runs, **summary(runs)}
            report.errors += [f"{r['label']}: {r['error']}" for r in runs if r.get("status") != "complete"]
    return report


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(runs)
    over = [r["overhead"] for r in runs if r.get("overhead") is not None]
    return {"n": n, "complete": sum(r["complete"] for r in runs),
            "first_attempt_complete": sum(r.get("first_attempt_complete", False) for r in runs),
            "runs_with_crash": sum(r.get("crashes", 0) > 0 for r in runs),
            "crashes": sum(r.get("crashes", 0) for r in runs),
            "overhead_median": statistics.median(over) if over else None,
            "wall_s_median": statistics.median([r["wall_s"] for r in runs if r.get("wall_s")] or [0.0])}


def table(report: Report) -> str:
    rows = []
    for name, r in report.results.items():
        n = r["n"]
        rows.append([r["arm"], r["workers"], n, _share(r["complete"], n),
                     _share(r["first_attempt_complete"], n) if r["arm"] != "epoch-end" else "(no retries)",
                     f"{r['runs_with_crash']} ({r['crashes']} crashes)", fmt(r["overhead_median"], ".3f", "n/a"),
                     fmt(r["wall_s_median"], ".0f")])
    head = ["arm", "workers / cluster", "runs", "every worker's trace kept", "on the first attempt",
            "runs with a profiler crash", "traced / untraced step", "run wall s"]
    return f"{heading(report)}\n\n{markdown_table(head, rows, right=(1, 2, 3, 4, 5, 6, 7))}"


def _share(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.0f}%)" if n else "n/a"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_preset=None, default_repeats=1)
    p.add_argument("--runs", type=int, default=20, help="runs per arm with 2 workers (half as many with more)")
    p.add_argument("--workers", default="2,4", help="comma-separated worker counts")
    p.add_argument("--arms", default="in-process,unguarded", help=f"comma-separated: {', '.join(ARMS)}")
    p.add_argument("--profile-retries", type=int, default=DEFAULT_RETRIES,
                   help=f"retries of the in-process arm (default {DEFAULT_RETRIES}, as perfkit run)")
    p.add_argument("--players", default="60000,15000", help="TRAIN,TEST players (default: the quick preset's)")
    p.add_argument("--clusters", default="", help="comma-separated cluster files to add as rows")
    args = p.parse_args(argv)
    args.workers = sorted({int(w) for w in str(args.workers).split(",") if w.strip()})
    args.arms = [a.strip() for a in str(args.arms).split(",") if a.strip()]
    args.clusters = [Path(c.strip()) for c in str(args.clusters).split(",") if c.strip()]
    missing = [str(c) for c in args.clusters if not c.is_file()]
    if missing:
        raise SystemExit(f"--clusters: no such file: {', '.join(missing)}")
    try:
        args.players = [int(x) for x in str(args.players).split(",")]
    except ValueError:
        args.players = []
    if len(args.players) != 2 or min(args.players) < 2 * BATCH:
        raise SystemExit(f"--players: give TRAIN,TEST, each at least {2 * BATCH}, e.g. 60000,15000")
    for arm in args.arms:
        arm_args(arm, 0, 1)  # an unknown arm fails before the first run
    timeout = args.timeout
    args = finish_args(args)
    args.timeout = timeout or 900.0  # one 2-epoch run takes about a minute; a hung one is cut off
    if args.smoke:
        # The smallest epoch that still has an untraced step after the auto window (steps 3-12 of epoch 2)
        # for the overhead figure, and the smallest test set --players allows.
        args.runs, args.workers, args.arms = 1, [2], ["in-process"]
        args.players = [(3 + AUTO_LENGTH) * BATCH, 2 * BATCH]
        args.clusters = []
    if args.runs < 1 or (args.workers and min(args.workers) < 2) or not (args.workers or args.clusters):
        raise SystemExit("--runs: at least 1; --workers: counts >= 2, e.g. 2,4 (or none, with --clusters)")
    return conclude(measure(args), args, table)


if __name__ == "__main__":
    raise SystemExit(main())
