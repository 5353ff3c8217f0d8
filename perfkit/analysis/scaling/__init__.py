"""A sweep's analysis: ``study`` (``sweep.json``'s record, speedup, efficiency, the per-step split and CPU
cost per worker count), ``measure`` (each run's step and validation without perfkit's own trace capture or a
restart), ``model`` (the step-time model and its fit), ``forecast`` (its forecast with intervals from
leave-one-count-out error) and ``ways`` (each way's memory per replica and sync cost per step)."""
