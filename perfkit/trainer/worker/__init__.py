"""What runs inside a worker process: perfkit's own worker (``main``: fit under a strategy; ``ps``: a
parameter-server chief or server), a user's script under ``perfkit.record`` (``record``), the worker's part
of the run (``part``: status.json and the step tables) and its ties to the launcher (``guard``)."""
