"""The C library, for what Python's standard library does not expose: ``prctl`` (the parent-death signal,
the child subreaper, a thread's name), ``setns`` (``os.setns`` is Python 3.12+) and glibc's ``mallopt``.
Each returns False where the platform lacks it."""

from __future__ import annotations

import os
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NAME = 15
CLONE_NEWNET = 0x40000000
M_PERTURB = -6  # glibc mallopt: fill freed blocks with this byte and new ones with its complement


def libc() -> Any:
    """This process's C library (ctypes), or None where it cannot be loaded."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def set_parent_death_signal(sig: int) -> bool:
    """Have the kernel send ``sig`` to this process when its parent dies, however the parent dies."""
    c = libc()
    try:
        return c is not None and c.prctl(PR_SET_PDEATHSIG, int(sig)) == 0
    except AttributeError:  # not Linux
        return False


def become_subreaper() -> bool:
    """Have the orphaned descendants of this process reparented to it (not to init), so that it can wait
    for processes that another of its children forked."""
    c = libc()
    try:
        return c is not None and c.prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
    except AttributeError:  # not Linux
        return False


def set_thread_name(name: str) -> bool:
    """The calling thread's name (``comm``: what top and ps -o comm show), at most 15 bytes."""
    c = libc()
    try:
        return c is not None and c.prctl(PR_SET_NAME, name.encode()[:15]) == 0
    except AttributeError:
        return False


def enter_netns(path: str) -> bool:
    """Move the calling thread (only it) into the network namespace at ``path`` (``/run/netns/NAME``)."""
    c = libc()
    if c is None or not hasattr(c, "setns"):
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return c.setns(fd, CLONE_NEWNET) == 0
    finally:
        os.close(fd)


def set_malloc_perturb(byte: int) -> bool:
    """glibc's M_PERTURB (0 turns it off); False where the C library has no mallopt."""
    c = libc()
    return c is not None and hasattr(c, "mallopt") and bool(c.mallopt(M_PERTURB, byte))
