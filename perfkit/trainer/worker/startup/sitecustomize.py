"""perfkit's start-up hook: Python imports ``sitecustomize`` at start-up from the first directory on its path
that has one, and ``perfkit launch`` puts this one's directory first on the launched command's
``PYTHONPATH`` (unless ``--no-auto-record``). It steps aside (this directory leaves ``sys.path``, and the
``sitecustomize`` it shadows, if any, is imported as it would have been), then asks
``perfkit.trainer.worker.auto`` to watch for TensorFlow. Nothing is imported from TensorFlow here.

It works for ``python script.py``, ``python -m module`` and console scripts alike; not under ``python -S``
or ``-I``, which skip ``sitecustomize`` or ``PYTHONPATH``.
"""

import os
import sys


def _step_aside() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401 - the one this file shadows, as Python would have run it
    except ModuleNotFoundError as exc:
        if exc.name != "sitecustomize":
            raise
        if mine is not None:
            sys.modules["sitecustomize"] = mine


def _start() -> None:
    try:
        from perfkit.trainer.worker import auto
    except ImportError:  # an interpreter without perfkit: the command runs, unrecorded
        return
    auto.install_from_env()


_step_aside()
_start()
