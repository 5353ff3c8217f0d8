"""Two SSH hosts against one machine: what reaching the hosts over SSH adds to a launch.

Interleaved round by round, the same script (the article's, ``article_multi_script``, at the quick preset's
size: 60,000 samples, 3 epochs, with perfkit's default trace window; ``--smoke``: ``examples/keras_fit``, 2
epochs of 10 steps, no trace window) as ``perfkit launch --workers 2`` on one machine and
as ``perfkit launch --hosts east,west`` across two hosts
made here (``_sshhosts``: a network namespace and a real sshd each; the launching process on east, as on a
user's first node), each host writing into a results directory of its own so that its part really comes
back over SSH. Figures: "command to first step" (``perfkit analyze``'s: the launching command's start to the
earliest first step of any worker; each SSH host's part counts from the launching command's start), the
difference per host (goal <= 1 s more per host, issue 47), and the time to bring a host's part back (the
``transfer`` each fetched part records; goal <= 2 s for a quick run). With ``--faults N``, N times each: the
launching perfkit killed (SIGKILL) and one host's link cut mid-run, each timed until no process perfkit started
is left on the hosts (on the cut host: its watchdog alone; goal < 10 s). Needs root, iproute2 and OpenSSH.

    python -m benchmarks hosts --repeats 5 --faults 10
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import (
    CHECKOUT,
    Report,
    conclude,
    finish_args,
    fmt_range,
    heading,
    make_parser,
    markdown_table,
    progress,
    run_measured,
    stats,
)

NAME = "hosts"
QUICK = (sys.executable, "-m", "benchmarks.article_multi_script", "--samples", "60000", "--epochs", "3")
SMOKE = (sys.executable, str(CHECKOUT / "examples" / "keras_fit" / "train.py"), "--epochs", "2",
         "--steps-per-epoch", "10")
GOAL_PER_HOST_S = 1.0
GOAL_FETCH_S = 2.0


def _launch(hosts: Any, args: argparse.Namespace, where: list[str], results: Path, label: str) -> dict[str, Any]:
    script, trace = (SMOKE, ["--no-profile"]) if args.smoke else (QUICK, [])
    argv = hosts.on("east", [sys.executable, "-m", "perfkit", "launch", *where, *trace, "--quiet",
                             "--results-dir", str(results), "--", *script])
    proc = run_measured(argv, args.timeout, env=hosts.env)
    out: dict[str, Any] = {"label": label, "wall_s": proc.wall_s}
    if not proc.ok:
        return {**out, "error": proc.error()}
    lead = Path(proc.stdout.strip().splitlines()[-1])
    return {**out, **_figures(lead)}


def _figures(lead: Path) -> dict[str, Any]:
    """Command to first step over the run's parts (or its one directory), and each part's transfer."""
    from perfkit.analysis.summary import startup_seconds
    from perfkit.results import RunRecord, load_meta

    rid = load_meta(lead).run_id
    parts = sorted(lead.parent.glob(f"{rid}--*")) or [lead]
    starts = [startup_seconds(RunRecord.load(p)) for p in parts]
    transfers = [load_meta(p).extra.get("transfer") for p in parts]
    return {"startup_s": min(starts), "fetch_s": [t["seconds"] for t in transfers if t],
            "fetch_bytes": [t["bytes"] for t in transfers if t]}


def measure(args: argparse.Namespace) -> Report:
    from benchmarks import _sshhosts

    report = Report(NAME, {"repeats": args.repeats, "faults": args.faults,
                           "script": " ".join((SMOKE if args.smoke else QUICK)[1:]), "trace_window": not args.smoke})
    report.targets = {"extra_per_host_s_max": GOAL_PER_HOST_S, "fetch_s_max": GOAL_FETCH_S}
    got: dict[str, list[dict[str, Any]]] = {"one machine, 2 workers": [], "2 SSH hosts, 1 worker each": []}
    with tempfile.TemporaryDirectory(prefix="perfkit-bench-hosts-") as tmp, _sshhosts.two_hosts(Path(tmp)) as hosts:
        for i in range(args.repeats):
            runs = Path(tmp) / f"round{i}"
            progress(f"round {i + 1}/{args.repeats}: one machine")
            got["one machine, 2 workers"].append(_launch(hosts, args, ["--workers", "2"], runs / "local", "local"))
            progress(f"round {i + 1}/{args.repeats}: two SSH hosts")
            got["2 SSH hosts, 1 worker each"].append(_launch(
                hosts, args, ["--hosts", "east,west", "--remote-results-dir", str(runs / "hosts" / "{host}")],
                runs / "here", "hosts"))
            time.sleep(1)  # the hosts' ports (TIME_WAIT) and the last run's processes gone before the next
        faults = [_fault(hosts, args, Path(tmp) / f"fault{i}", kind) for i in range(args.faults)
                  for kind in ("launcher killed", "link cut")]
    local, remote = got["one machine, 2 workers"], got["2 SSH hosts, 1 worker each"]
    extra = [(r.get("startup_s") - lo.get("startup_s")) / 2 for r, lo in zip(remote, local)
             if r.get("startup_s") is not None and lo.get("startup_s") is not None]
    fetches = [f for r in remote for f in r.get("fetch_s") or []]
    report.results = {
        "startup_s": {name: stats(r.get("startup_s") for r in rs) for name, rs in got.items()},
        "extra_per_host_s": stats(extra), "fetch_s": stats(fetches),
        "fetch_bytes": stats(b for r in remote for b in r.get("fetch_bytes") or []),
        "meets_target": {"extra per host": _meets(stats(extra), GOAL_PER_HOST_S),
                         "fetch": _meets(stats(fetches), GOAL_FETCH_S)},
        "faults": {kind: stats(f["gone_s"] for f in faults if f["kind"] == kind)
                   for kind in ("launcher killed", "link cut")},
        "fault_runs": faults, "runs": got}
    report.errors = [f"{name} #{i + 1}: {r['error']}" for name, rs in got.items() for i, r in enumerate(rs)
                     if r.get("error")] + [f"{f['kind']}: {f['error']}" for f in faults if f.get("error")]
    return report


def _fault(hosts: Any, args: argparse.Namespace, results: Path, kind: str) -> dict[str, Any]:
    """One long run on both hosts, the fault made once it trains; seconds until its processes are gone."""
    import signal
    import subprocess

    progress(f"fault: {kind}")
    argv = hosts.on("east", [sys.executable, "-m", "perfkit", "launch", "--hosts", "east,west", "--no-profile",
                             "--quiet", "--results-dir", str(results / "here"), "--remote-results-dir",
                             str(results / "{host}"), "--", *SMOKE[:2], "--epochs", "200", "--steps-per-epoch", "20"])
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=hosts.env)
    out: dict[str, Any] = {"kind": kind, "gone_s": None}
    try:
        hosts.training("west", SMOKE[1])
        if kind == "launcher killed":
            hosts.launcher(proc.pid).send_signal(signal.SIGKILL)
            out["gone_s"] = hosts.emptied(30)
        else:
            hosts.link("west", up=False)
            out["gone_s"] = hosts.emptied(30, "west")
            hosts.link("west", up=True)
        proc.wait(timeout=120)
        if hosts.emptied(30) is None:
            out["error"] = f"left on the hosts: {hosts.left()}"
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        out["error"] = str(exc)
    finally:
        hosts.link("west", up=True)
        proc.kill()
    if out["gone_s"] is None and "error" not in out:
        out["error"] = f"processes left 30 s after the fault: {hosts.left()}"
    return out


def _meets(s: dict[str, Any], goal: float) -> bool | None:
    return None if s.get("median") is None else s["median"] <= goal


def table(report: Report) -> str:
    r = report.results
    rows = [[name, fmt_range(s, ".2f")] for name, s in r["startup_s"].items()]
    rows += [["SSH hosts: more per host (half the difference, same round)", fmt_range(r["extra_per_host_s"], ".2f")],
             ["SSH hosts: bringing one host's part back", fmt_range(r["fetch_s"], ".2f")]]
    met = "; ".join(f"{k}: {'met' if v else 'missed' if v is False else 'not measured'}"
                    for k, v in r["meets_target"].items())
    size = r["fetch_bytes"].get("median")
    faults = [[f"{kind}: until no process is left" + (" on the cut host" if kind == "link cut" else ""),
               fmt_range(st, ".1f"), st.get("n")] for kind, st in r["faults"].items() if st.get("n")]
    fault_table = ("\n\n" + markdown_table(["fault", "seconds", "N"], faults, right=(1, 2))) if faults else ""
    return (f"{heading(report)}\n\n{markdown_table(['launch', 'command to first step s'], rows, right=(1,))}\n\n"
            f"Goals: <= {GOAL_PER_HOST_S:g} s more per host, <= {GOAL_FETCH_S:g} s to bring a part back ({met}); "
            f"a part is {size / 1e6 if size else float('nan'):.2f} MB (median). Median (min–max) over "
            f"{report.params['repeats']} rounds.{fault_table}")


def main(argv: list[str] | None = None) -> int:
    import os

    p = make_parser(NAME, __doc__, default_preset=None, default_repeats=5)
    p.add_argument("--faults", type=int, default=0, help="N launcher kills and N link cuts, each timed")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench hosts: needs root (it makes two hosts in network namespaces, each with an sshd)")
    if args.timeout is None:
        args.timeout = 600.0
    return conclude(measure(finish_args(args)), args, table)
