"""Write a file so that readers see the old version or the new one, never half of it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write`` on a fresh temp file beside ``path``, then rename it into place.

    The temp file is opened with ``open(..., "xb")`` rather than ``mkstemp`` so the result gets the
    umask's usual mode, not mkstemp's 0600; a failed or interrupted write removes it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "xb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
