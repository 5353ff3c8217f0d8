"""Facts about this machine and the software versions, recorded in every run.json."""

from __future__ import annotations

import platform
import socket
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil


def hostname() -> str:
    return socket.gethostname()


@lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    return {
        "hostname": hostname(),
        "cpu_model": cpu_model(),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
        "platform": platform.platform(),
    }


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, Any]:
    """Installed distribution versions; read from metadata so TensorFlow need not be imported."""
    return {
        "perfkit": _version("perfkit"),
        "tensorflow": _version("tensorflow") or _version("tensorflow-cpu"),
        "keras": _version("tf-keras") or _version("tf_keras"),
        "python": sys.version.split()[0],
    }


def command_started_ns() -> int:
    """Wall-clock origin of the current run's 'command to first step': the command's start (perfkit's first
    import) for its first run, the run's own start for a later one (``perfkit._started.begin_run``)."""
    from perfkit._started import run_origin_ns

    return run_origin_ns()
