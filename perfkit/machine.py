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

from perfkit._tf import legacy_switch


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
        # the Keras perfkit's runs train with: tf-keras from TensorFlow 2.16 on, before it TensorFlow's own Keras 2
        "keras": (_version("tf-keras") or _version("tf_keras")) if legacy_switch() else _version("keras"),
        "python": sys.version.split()[0],
    }


def command_started_ns() -> int:
    """Wall-clock origin of the current run's 'command to first step': the command's start (perfkit's first
    import) for its first run, the run's own start for a later one (``perfkit._started.begin_run``)."""
    from perfkit._started import run_origin_ns

    return run_origin_ns()


def nvidia_gpus() -> int:
    """NVIDIA GPUs this process could use, counted without importing TensorFlow (the CLI checks
    ``--all-reduce nccl`` before anything runs): the driver's ``/proc/driver/nvidia/gpus/*`` entries, else
    the ``/dev/nvidiaN`` device nodes (a container is often given those without the driver's /proc), and none
    when ``CUDA_VISIBLE_DEVICES`` hides them all ("" or "-1"). Whether TensorFlow was built with CUDA is not
    known here: a CPU-only TensorFlow then fails in the workers, with TensorFlow's own error."""
    import os
    import re

    gpus = Path("/proc/driver/nvidia/gpus")
    try:
        found = len([p for p in gpus.iterdir() if p.is_dir()]) if gpus.is_dir() else 0
        if not found:
            found = len([p for p in Path("/dev").glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name)])
    except OSError:
        found = 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        shown = [d for d in visible.split(",") if d.strip()]
        if not shown or shown[0].strip() == "-1":
            return 0
        found = min(found, len(shown))
    return found
