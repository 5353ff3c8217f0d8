"""After a run: record where each worker's profiler capture landed, in run.json -> ``profile``.

Nothing is parsed here: the captures are read by the analysis (``perfkit.analysis.traces``), so no analysis
code runs in the training process and a parser fix reaches old runs.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def finish_traces(run: Any, spec: str, captures: dict[str, dict[str, Any]]) -> None:
    """Record the captures of ``run`` (a RunDir) in run.json (``spec``: the window asked for, e.g. "auto");
    parsing them is left to the analysis."""
    profile: dict[str, Any] = {"spec": spec}
    window = next((c.get("window") for _, c in sorted(captures.items()) if c.get("window")), None)
    if window is not None:
        profile["window"] = window
    profile["workers"] = {k: dict(v) for k, v in captures.items()}
    try:
        run.update(profile=profile)
    except OSError as exc:  # the training records are already safe on disk
        log.warning("could not record the profiler captures in run.json: %s", exc)
