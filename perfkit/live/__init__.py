"""Watching a run while it trains (``perfkit watch``): each worker's heartbeat and status, its process's CPU,
read into a frozen ``Snapshot`` once an interval (``watcher.py``), drawn by ``render.py``. Read-only: the
watcher writes nothing into the run it watches."""
