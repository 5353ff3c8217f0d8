"""Write a file so that readers see the old version or the new one, never half of it."""

from __future__ import annotations

import errno
import json
import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

# A results disk that cannot take more: said in words, the same everywhere (worker, launcher, CLI).
_REASONS = {errno.ENOSPC: "no space left on device", errno.EROFS: "read-only file system",
            errno.EDQUOT: "disk quota exceeded", errno.EACCES: "permission denied", errno.EPERM: "permission denied"}
DISK_REASONS = tuple(_REASONS[e] for e in (errno.ENOSPC, errno.EROFS, errno.EDQUOT))


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write`` on a fresh temp file beside ``path``, then rename it into place.

    The temp file is opened with ``open(..., "xb")`` rather than ``mkstemp`` so the result gets the
    umask's usual mode, not mkstemp's 0600; a failed or interrupted write removes it. An ``OSError`` (a
    full or read-only disk) is raised again naming ``path``, not the temp file nobody will see.
    """
    if _special(path):  # /dev/null, /dev/stdout, a FIFO: renaming onto it would replace the device itself
        with open(path, "wb") as fh:
            write(fh)
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "xb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # remounted read-only under us: nothing more can be done, the original error says why
            pass
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename != str(path):
            raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
        raise


def read_object(path: Path) -> dict[str, Any]:
    """A JSON object file that another process replaces as it runs (a worker's status, its heartbeat), or {}:
    absent, not yet written, being replaced this instant on a filesystem that shows it, or not an object.
    Its readers poll it again, so none of these is an error."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _special(path: Path) -> bool:
    """An existing path that is not a regular file or a link to one (a device, a FIFO, a socket)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # absent (the usual case) or unreadable: a new regular file is what is asked for
        return False


def write_error(exc: OSError, path: Path | str | None = None) -> str:
    """``could not write PATH: no space left on device``: one line for a write that failed."""
    where = path if path is not None else exc.filename
    reason = _REASONS.get(exc.errno or 0) or (exc.strerror or str(exc)).lower()
    return f"could not write {where}: {reason}" if where else f"could not write: {reason}"


def is_disk_error(exc: BaseException) -> bool:
    """A write refused by the disk itself (full, read-only, over quota), not by perfkit's own logic."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT)


def disk_refuses(path: Path, below: int = 1 << 20) -> str | None:
    """Why the disk holding ``path`` takes no more writes (under ``below`` bytes free, or mounted read-only),
    in the words of ``write_error``; None when it does. For a process that died without saying why: on a
    full disk it could not write its own last words either."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return _REASONS[errno.EROFS]
    return _REASONS[errno.ENOSPC] if st.f_bavail * st.f_frsize < below else None
