"""`perfkit launch`: your own training command, once per worker, under perfkit's launcher."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from perfkit.cli import _shared as opt
from perfkit.cli._shared import app, with_progress
from perfkit.config import Mode


@app.command("launch", context_settings={"allow_interspersed_args": False})
def launch_command(
    command: Annotated[list[str], typer.Argument(help="The command to run per worker, after '--'.",
                                                 show_default=False, metavar="-- COMMAND...")],
    mode: Annotated[Mode, typer.Option(help="multi: one process per worker with its own TF_CONFIG; single: "
                                       "the command once, no TF_CONFIG (the baseline); ps: a parameter-server "
                                       "script, once per task (chief, workers, parameter servers; "
                                       "docs/ps-mode.md).")] = Mode.multi,
    workers: opt.Workers = None,
    ps: Annotated[Optional[int], typer.Option("--ps", help="ps, with --workers or --hosts: parameter servers "
                                              "(default 1; with --hosts on the first host, beside the chief).",
                                              show_default=False)] = None,
    cluster: opt.ClusterFile = None,
    emulate: opt.Emulate = False,
    pin: opt.Pin = True,
    results_dir: opt.ResultsDir = Path("results"),
    run_id: opt.RunId = None,
    label: opt.Label = None,
    sample_interval: opt.SampleInterval = 0.5,
    connect_timeout: Annotated[float, typer.Option(help="multi: seconds for every worker's TF server to come "
                                                   "up.")] = 120.0,
    hang_timeout: opt.HangTimeout = "auto",
    max_restarts: Annotated[int, typer.Option(help="Start the command again up to K times after a worker dies "
                                              "(resuming is the script's own, e.g. BackupAndRestore).")] = 0,
    profile_steps: Annotated[str, typer.Option(help="Trace window of the recorded steps: global steps 'A-B', "
                                               "'auto' or 'off'.")] = "auto",
    no_profile: opt.NoProfile = False,
    no_auto_record: Annotated[bool, typer.Option("--no-auto-record", help="Do not record a script's Keras fit or "
                                                 "custom loop through perfkit's start-up hook (CPU, memory and exit "
                                                 "status only, unless it uses perfkit.record).")] = False,
    step_function: Annotated[Optional[str], typer.Option(help="A custom loop's training step: the name of the "
                                                         "tf.function to time (default: the one that calls "
                                                         "Strategy.run).", show_default=False)] = None,
    cluster_from: opt.ClusterFrom = None,
    base_port: Annotated[Optional[int], typer.Option(help="multi, --hosts or --cluster-from slurm: each worker's "
                                                     "port on its host is this + its index there (default 23456).",
                                                     show_default=False)] = None,
    hosts: Annotated[Optional[str], typer.Option(help="Start the command on these hosts over SSH: host[:SLOTS],... "
                                                 "(user@host and ~/.ssh/config aliases too; SLOTS workers on that "
                                                 "host, default 1); --mode single takes one host. A cluster file "
                                                 "whose hosts have ssh = \"...\" does the same (docs/cluster.md).",
                                                 show_default=False)] = None,
    host: Annotated[Optional[str], typer.Option(help="multi: start only this host's workers of --cluster (run on "
                                                "each host with the same --run-id; docs/cluster.md).",
                                                show_default=False)] = None,
    task_index: Annotated[Optional[int], typer.Option(help="multi: start only this worker of --cluster.",
                                                      show_default=False)] = None,
    env: Annotated[Optional[list[str]], typer.Option("--env", help="--hosts: pass this variable (NAME, or "
                                                     "NAME=VALUE) to the command on every host; nothing else of "
                                                     "this shell's environment travels.", show_default=False)] = None,
    remote_perfkit: Annotated[str, typer.Option(help="--hosts: perfkit's command on the hosts (on their PATH over "
                                                "SSH, or a path).")] = "perfkit",
    remote_results_dir: Annotated[Optional[str], typer.Option(help="--hosts: where each host writes its part "
                                                              "('{host}' is replaced by its name; by default "
                                                              "--results-dir's absolute path).",
                                                              show_default=False)] = None,
    agent: Annotated[bool, typer.Option("--agent", hidden=True)] = False,
    allow_unenforced: opt.AllowUnenforced = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the run directory.")] = False,
    live: opt.Live = False,
) -> None:
    """Run COMMAND once per worker and record it as it is: any command's CPU, memory and exit status.

    A Python script's Keras fit or custom loop is recorded without a change to it (steps, epochs, a trace
    window). Workers on this machine (--workers N), on your hosts over SSH (--hosts h1,h2), from a cluster
    file, or from a scheduler's variables."""
    from perfkit.trainer.options import ClusterFlags, RecordFlags

    flags = ClusterFlags(workers=workers, cluster=cluster, host=host, task_index=task_index, emulate=emulate, pin=pin,
                         connect_timeout=connect_timeout, hang_timeout=hang_timeout, max_restarts=max_restarts,
                         cluster_from=cluster_from, base_port=base_port, ps=ps, allow_unenforced=allow_unenforced)
    record = RecordFlags(profile_steps="off" if no_profile else profile_steps, sample_interval=sample_interval,
                         label=label, auto_record=not no_auto_record, step_function=step_function)
    if agent:
        _agent(command, mode, flags, record, results_dir, run_id)
        return
    display = opt.Display.of(quiet, live)
    from perfkit.trainer.remote.options import over_ssh

    remote = over_ssh(command, mode, flags, record, hosts, env, remote_perfkit, remote_results_dir)
    if remote is not None:
        from perfkit.trainer.remote.launcher import launch_hosts

        cluster_spec, args, where = remote
        path = with_progress(display, lambda observer: launch_hosts(cluster_spec, args, where, results_dir,
                                                                    observer, run_id, label))
    else:
        from perfkit.trainer.command import run_launch
        from perfkit.trainer.options import launch_options

        lopts, opts = launch_options(command, mode, flags, record)
        path = with_progress(display, lambda observer: run_launch(lopts, opts, results_dir, observer, run_id))
    if quiet:
        typer.echo(str(path))  # scripts get the run directory and nothing else


def _agent(command: list[str], mode: Mode, flags: Any, record: Any, results_dir: Path, run_id: Optional[str]) -> None:
    """This host's part of a run that ``perfkit launch --hosts`` started over SSH (trainer/remote/agent.py)."""
    import sys
    import threading

    from perfkit._started import adopt_origin
    from perfkit.cluster import cluster_from_dict
    from perfkit.config import sanitize_id
    from perfkit.trainer.command import run_launch
    from perfkit.trainer.options import launch_options
    from perfkit.trainer.remote.agent import Lines, Relay, Watchdog, handshake

    lines, relay = Lines(sys.stdin.fileno()), Relay()
    results_dir = results_dir.expanduser()
    word = handshake(lines, relay, str(results_dir), command[0] if command else "")
    Watchdog(lines, relay).start()
    adopt_origin(int(word["command_started_wall_ns"]))
    spec = cluster_from_dict(word["cluster"]) if word.get("cluster") else None
    named = tuple((str(k), str(v)) for k, v in dict(word.get("env") or {}).items())
    lopts, opts = launch_options(command, mode, flags, record, cluster_spec=spec, env=named)
    rid = sanitize_id(run_id or word["run_id"])
    part = results_dir / (f"{rid}--{sanitize_id(opts.part)}" if opts.part else rid)
    done = threading.Event()
    follower = relay.follow(part, list(opts.local_workers), done)
    try:
        run_launch(lopts, opts, results_dir, relay, rid)
    finally:
        done.set()
        follower.join(timeout=5)
        relay.ended(part)
        relay.close()
