"""What a sweep's run is (its ``role``) and how a count scales (its ``way``): the values ``sweep.json`` and
the run table hold, named once for the study, the forecast and the sweep that writes them."""

BASELINE = "baseline"  # a run's role: the single-mode baseline
POINT = "workers"  # a run's role: one count (of replicas, workers or ps workers: its ``way``)
PROBE = "probe"  # a run's role: one worker at a count's per-worker batch (its ``workers``: that count)
WORKERS = "workers"  # the way of N MultiWorkerMirrored worker processes (a sweep recorded before --ways)
