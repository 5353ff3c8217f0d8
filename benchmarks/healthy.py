"""Healthy runs are never failed: unmodified training scripts of several shapes launched again and again,
every false failure counted (target: none), and each worker's time from its last step to its process's exit,
and from fit's start to its exit, beside the same script run bare.

Shapes (``perfkit launch`` with its default hang limit and no trace window, as the runs of issue 46):
- ``article-4w``: the article's script shape (``article_multi_script``: ``repeat()`` and
  ``steps_per_epoch``) on 4 local workers, at the article's 60,000 samples and 3 epochs unless ``--smoke``;
- ``finite-4w``: the same script with a dataset that ends each epoch (no ``repeat()``, no
  ``steps_per_epoch``), smaller;
- ``keras-fit-2w`` and ``custom-loop-2w``: ``examples/keras_fit`` and ``examples/custom_loop`` on 2 workers;
- ``cluster``: the article's script on the article's cluster emulated here (``examples/blog-cluster.toml``:
  3 workers on a 1.6-core host, 1 on a 0.4-core host; needs root);
- ``bare-4w``: ``article-4w``'s script as 4 plain processes with ``TF_CONFIG`` and no perfkit: not a
  verdict, the teardown to compare (the script prints its last step's wall time; its exit is timed here).
A false failure is a launch that exits non-zero or a run.json whose status is not ``complete``.

    python -m benchmarks healthy --repeats 20          # 5 shapes x 20 = 100 launches, plus 20 bare runs
    python -m benchmarks healthy --shapes article-4w,bare-4w --repeats 5
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import (
    CHECKOUT,
    PERFKIT,
    Report,
    choice_list,
    conclude,
    env_with_repo,
    finish_args,
    fmt_range,
    heading,
    make_parser,
    markdown_table,
    progress,
    run_measured,
    stats,
)
from benchmarks._runs import runs_dir
from benchmarks.article_multi_script import FIT_BEGAN_MARK, LAST_STEP_MARK
from perfkit.cluster import free_ports

NAME = "healthy"
SCRIPT = ("-m", "benchmarks.article_multi_script")
ARTICLE = ("--samples", "60000", "--epochs", "3")
SMALL = ("--samples", "8192", "--epochs", "3", "--global-batch", "512", "--units", "64", "32")
EXAMPLE = ("--epochs", "3", "--steps-per-epoch", "20", "--per-worker-batch", "64")
SHAPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # name -> (where, command after python)
    "article-4w": (("--workers", "4"), (*SCRIPT, *ARTICLE)),
    "finite-4w": (("--workers", "4"), (*SCRIPT, *SMALL, "--finite")),
    "keras-fit-2w": (("--workers", "2"), (str(CHECKOUT / "examples" / "keras_fit" / "train.py"), *EXAMPLE)),
    "custom-loop-2w": (("--workers", "2"), (str(CHECKOUT / "examples" / "custom_loop" / "train.py"), *EXAMPLE)),
    "cluster": (("--cluster", str(CHECKOUT / "examples" / "blog-cluster.toml")), (*SCRIPT, *SMALL)),
}
BARE = "bare-4w"
POLL_S = 0.25  # as the launcher polls its workers (trainer/processes.py)
SMOKE_ARGS = ("--samples", "2048", "--epochs", "2", "--global-batch", "512", "--units", "16", "8")


@dataclass
class Launch:
    shape: str
    ok: bool  # exit 0 and run.json complete (bare: every process exited 0)
    rc: int | None
    status: str | None
    wall_s: float
    message: str
    teardown_s: list[float | None] = field(default_factory=list)  # each worker: last step to exit
    fit_s: list[float | None] = field(default_factory=list)  # each worker: fit's start to its last step
    stopped: int = 0  # workers perfkit stopped after their steps


def launch(shape: str, root: Path, i: int, args: Any) -> Launch:
    where, command = SHAPES[shape]
    if args.smoke:
        command = (*SCRIPT, *SMOKE_ARGS)
    results = root / f"{shape}-{i}"
    proc = run_measured([*PERFKIT, "launch", *where, "--no-profile", "--quiet", "--results-dir", str(results), "--",
                         sys.executable, *command], args.timeout, env=env_with_repo())
    runs = [p for p in results.glob("*") if (p / "run.json").is_file()]
    meta = json.loads((runs[0] / "run.json").read_text()) if len(runs) == 1 else {}
    workers = meta.get("workers") or []
    teardown = [(w.get("teardown") or {}) for w in workers]
    message = meta.get("error") or proc.error() or ""
    logs = [runs[0] / "workers" / str(w["index"]) / "worker.log" for w in workers]
    return Launch(shape, proc.rc == 0 and meta.get("status") == "complete", proc.rc, meta.get("status"),
                  proc.wall_s, message, [t.get("s") for t in teardown], [fit_s(log) for log in logs],
                  sum(bool(t.get("stopped")) for t in teardown))


def bare(root: Path, i: int, args: Any, workers: int = 4) -> Launch:
    """The article shape as plain processes: each worker's last step (it prints it) to its exit, timed here."""
    command = (*SCRIPT, *(SMOKE_ARGS if args.smoke else ARTICLE))
    ports = free_ports(workers)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    logs = [root / f"{BARE}-{i}.{w}.log" for w in range(workers)]
    start, procs = time.monotonic(), []
    for w in range(workers):
        env = {**env_with_repo(), "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": w}})}
        with open(logs[w], "wb") as out:
            procs.append(subprocess.Popen([sys.executable, *command], stdout=out, stderr=subprocess.STDOUT, env=env,
                                          stdin=subprocess.DEVNULL))
    exits: list[float | None] = [None] * workers
    while any(t is None for t in exits) and time.monotonic() - start < args.timeout:
        for w, proc in enumerate(procs):
            if exits[w] is None and proc.poll() is not None:
                exits[w] = time.time()  # seen within POLL_S of its exit, as perfkit's launcher sees its workers'
        time.sleep(POLL_S)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    teardown = [_after(log, t) for log, t in zip(logs, exits)]
    ok = all(p.returncode == 0 for p in procs)
    return Launch(BARE, ok, max(abs(p.returncode) for p in procs), None, time.monotonic() - start,
                  "" if ok else f"exit codes {[p.returncode for p in procs]}", teardown,
                  [fit_s(log) for log in logs])


def _marks(log: Path) -> dict[str, float]:
    """The script's wall-clock marks (fit began, last step ended) from its output."""
    out: dict[str, float] = {}
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        for key, mark in (("began", FIT_BEGAN_MARK), ("last", LAST_STEP_MARK)):
            if line.startswith(mark):
                out[key] = float(line[len(mark):])
    return out


def _after(log: Path, exited: float | None) -> float | None:
    last = _marks(log).get("last")
    return None if exited is None or last is None else round(exited - last, 2)


def fit_s(log: Path) -> float | None:
    """From fit's start to its last step, by the script's own marks. With the time to exit after it, this
    gives fit's start to the process's exit: the moment TensorFlow's teardown lets it go (a tf.data
    autotuner's pass, docs/troubleshooting.md#slow-exit), which a faster fit reaches no sooner."""
    marks = _marks(log)
    return round(marks["last"] - marks["began"], 2) if "began" in marks and "last" in marks else None


def summarise(launches: list[Launch]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for shape in dict.fromkeys(t.shape for t in launches):
        mine = [t for t in launches if t.shape == shape]
        pairs = [(s, f) for t in mine for s, f in zip(t.teardown_s, t.fit_s or [None] * len(t.teardown_s))]
        out[shape] = {"n": len(mine), "failed": sum(not t.ok for t in mine), "stopped": sum(t.stopped for t in mine),
                      "teardown_s": stats(s for s, _ in pairs),
                      "fit_s": stats(f for _, f in pairs),
                      "fit_to_exit_s": stats(s + f if s is not None and f is not None else None for s, f in pairs),
                      "wall_s": stats(t.wall_s for t in mine)}
    return out


def table(report: Report) -> str:
    rows = [[shape, s["n"], "-" if shape == BARE else f"{s['failed']}/{s['n']}", fmt_range(s["teardown_s"], ".1f"),
             *(fmt_range(s[k], ".1f") if s[k]["n"] else "-" for k in ("fit_s", "fit_to_exit_s")),
             f"{s['teardown_s']['n']}", fmt_range(s["wall_s"], ".0f")] for shape, s in report.results["shapes"].items()]
    verdicts = [s for shape, s in report.results["shapes"].items() if shape != BARE]
    n, failed = sum(s["n"] for s in verdicts), sum(s["failed"] for s in verdicts)
    return "\n".join([heading(report), "", markdown_table(
        ["shape", "N", "failed", "last step to exit, s: median (min-max)",
         "fit's start to last step, s", "fit's start to exit, s", "workers timed", "wall s"],
        rows, right=(1, 6)), "", f"False failures: {failed} of {n} healthy launches (target: 0)."])


def main(argv: list[str] | None = None) -> int:
    p = make_parser(NAME, __doc__, default_preset=None, default_repeats=20)
    p.add_argument("--shapes", default=",".join([*SHAPES, BARE]), help=f"comma-separated: {', '.join([*SHAPES, BARE])}")
    p.set_defaults(timeout=900.0)
    args = p.parse_args(argv)
    shapes = choice_list("--shapes", args.shapes, [*SHAPES, BARE])
    if args.smoke:
        shapes = [s for s in shapes if s in ("article-4w", BARE)] or ["article-4w"]
    args = finish_args(args)
    root = runs_dir(args.results_root, NAME, args.stamp)
    report = Report(NAME, {k: v for k, v in vars(args).items() if k != "results_root"} | {"shapes": shapes})
    report.targets = {"false_failures": 0}
    launches: list[Launch] = []
    for i in range(args.repeats):  # shapes interleaved round by round
        for shape in shapes:
            progress(f"[{i + 1}/{args.repeats}] {shape}")
            t = bare(root, i, args) if shape == BARE else launch(shape, root, i, args)
            launches.append(t)
            if not t.ok:
                report.errors.append(f"{shape} #{i + 1}: rc {t.rc}, status {t.status}: {t.message}")
    report.results = {"shapes": summarise(launches), "launches": [asdict(t) for t in launches]}
    return conclude(report, args, table)


if __name__ == "__main__":
    sys.exit(main())
