"""This worker process's ties to its launcher and its CPU limits; and, as
``python -m perfkit.trainer.worker.guard LAUNCHER_PID CORES -- COMMAND...``, a user's command started as a worker.

perfkit's own worker ties itself to the launcher's life and pins itself (``trainer.worker.main``); a user's script
cannot be asked to, so this stands in front of it: it sets the parent-death signal and the CPU affinity,
then replaces itself with the command (``execvp``: same pid, and both settings survive the exec), so the
launcher's sampler, cgroup and signals reach the command itself.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from perfkit._libc import set_parent_death_signal

log = logging.getLogger("perfkit.worker")

EXIT_ORPHANED = 4
EXIT_NOT_STARTED = 127  # as a shell says for a command it cannot run


def die_with_launcher(launcher_pid: int | None) -> None:
    """Let the kernel SIGKILL this process when its launcher dies (even by kill -9), so no orphan is left
    waiting forever in a collective. A Python watchdog thread cannot do this: the strategy constructor
    blocks inside TensorFlow without releasing the GIL."""
    if not launcher_pid:
        return
    if not set_parent_death_signal(signal.SIGKILL):
        log.warning("cannot tie this worker to its launcher's life (no prctl PR_SET_PDEATHSIG here)")
    if os.getppid() != launcher_pid:  # the launcher died before prctl took effect
        log.error("launcher (pid %d) is gone; exiting", launcher_pid)
        os._exit(EXIT_ORPHANED)


def apply_cpu_limits(threads: int | None, cores: list[int] | None) -> None:
    """Pin this process (and every thread TF starts later) and cap TF's thread pools."""
    if cores:
        try:
            os.sched_setaffinity(0, cores)
        except (AttributeError, OSError) as exc:
            log.warning("could not pin to cores %s: %s", cores, exc)
    if threads:
        from perfkit._tf import tf

        t = tf()
        t.config.threading.set_intra_op_parallelism_threads(threads)
        t.config.threading.set_inter_op_parallelism_threads(max(1, min(2, threads)))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 4 or args[2] != "--":
        print("usage: python -m perfkit.trainer.worker.guard LAUNCHER_PID CORES|- -- COMMAND...", file=sys.stderr)
        return 2
    die_with_launcher(int(args[0]))
    if args[1] != "-":
        try:
            os.sched_setaffinity(0, [int(c) for c in args[1].split(",")])
        except (AttributeError, OSError, ValueError) as exc:
            print(f"perfkit: could not pin to cores {args[1]}: {exc}", file=sys.stderr)
    try:
        os.execvp(args[3], args[3:])
    except OSError as exc:
        print(f"perfkit: cannot run {args[3]!r}: {exc.strerror or exc}", file=sys.stderr)
    return EXIT_NOT_STARTED


if __name__ == "__main__":
    sys.exit(main())
