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
    """Let the kernel signal this process when its launcher dies (even by kill -9), so no orphan is left
    waiting forever in a collective. A Python watchdog thread cannot do this: the strategy constructor
    blocks inside TensorFlow without releasing the GIL.

    The signal is SIGINT where the launcher has a janitor (``hosts/janitor.py``, every multi-worker run's):
    the worker saves the steps of its current epoch as on Ctrl-C, and the janitor SIGKILLs it if it has not
    ended within its grace period (stuck in TensorFlow, where no Python handler runs). Without a janitor
    (a benchmark's helper processes) nothing would back SIGINT up, so it is SIGKILL."""
    if not launcher_pid:
        return
    sig = signal.SIGINT if has_janitor(launcher_pid) else signal.SIGKILL
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # Inherited from a launcher started in the background of a script (the shell ignores SIGINT there),
        # it would also survive the exec of a user's command: SIGINT must reach this worker as Ctrl-C.
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        except ValueError:  # not the main thread
            pass
    if not set_parent_death_signal(sig):
        log.warning("cannot tie this worker to its launcher's life (no prctl PR_SET_PDEATHSIG here)")
    else:
        log.info("%s when the launcher (pid %d) dies", sig.name, launcher_pid)
    if os.getppid() != launcher_pid:  # the launcher died before prctl took effect
        log.error("launcher (pid %d) is gone; exiting", launcher_pid)
        os._exit(EXIT_ORPHANED)


def has_janitor(launcher_pid: int) -> bool:
    """The launcher runs a janitor for its run: a child ``python -m perfkit.trainer.hosts.janitor --for PID``.
    Read from /proc (no psutil: this runs in front of every launched command)."""
    want = ["perfkit.trainer.hosts.janitor", "--for", str(launcher_pid)]
    try:
        tasks = os.listdir(f"/proc/{launcher_pid}/task")
        children = [c for t in tasks for c in _read(f"/proc/{launcher_pid}/task/{t}/children").split()]
    except OSError:
        return False
    return any(_read(f"/proc/{c}/cmdline").split("\0")[-4:-1] == want for c in children)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


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
