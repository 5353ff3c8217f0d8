"""Training runs: starting and watching worker processes (``single``, ``multi``, ``command``, ``processes``,
``supervise``, ``probe``; a run's options in ``options``), emulated hosts (``hosts``), and what runs inside a
worker process (``worker``). The workloads themselves are ``perfkit.workloads``."""
