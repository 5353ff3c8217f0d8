"""perfkit: how much faster is a multi-worker TensorFlow run than the single-machine baseline, and why not more."""

from __future__ import annotations

__version__ = "0.1.0"
