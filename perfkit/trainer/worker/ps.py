"""ParameterServerStrategy: the servers (workers and parameter servers) and the chief's step clock.

Under ParameterServerStrategy the chief runs ``model.fit``; workers and parameter servers are plain TF
servers that execute what the chief schedules on them, and Keras allows the chief no batch-level
callback. So no Python of perfkit's runs where a step runs. Each worker's steps are timed in the step's
own graph instead: ``StepClock`` wraps the model's ``train_step`` so that, on whichever worker runs it,
the step reads ``tf.timestamp()`` before and after the original step, and writes both into that worker's
row of a small table held on the parameter servers (the worker is told apart by
``tf.distribute.coordinator.experimental_get_current_worker_index``, resolved when the step runs). At
every epoch end, when Keras has joined all scheduled steps, the chief reads the tables and empties them.
The cost per step is three tiny variable updates on a parameter server: ``python -m benchmarks ps-clock`` sets
a ps run against the same training with no instrument and reports the steady epoch-time ratio.

The times are the worker's wall clock (``tf.timestamp``); they are put on the chief's monotonic clock with
the chief's anchor, the clock of every other record of its run directory (one machine: the same clock).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfkit.cluster import ClusterSpec
from perfkit.profiler.steps import ClockAnchor, StepLog
from perfkit.results import write_parquet

log = logging.getLogger(__name__)

PROGRESS_S = 1.0  # how often the chief reads the step counters for status.json (live progress, stall check)


def serve(cluster: ClusterSpec, index: int, status: Any) -> None:
    """Run task ``index`` (a worker or a parameter server) as a TF server until the launcher stops it."""
    from perfkit._tf import tf

    t = tf()
    me = cluster.tasks[index]
    resolver = t.distribute.cluster_resolver.TFConfigClusterResolver()

    def stopped(signum: int, frame: Any) -> None:  # the launcher's SIGTERM once the chief is done
        status.write(state="stopped")
        os._exit(0)

    signal.signal(signal.SIGTERM, stopped)
    server = t.distribute.Server(resolver.cluster_spec(), job_name=me.role, task_index=me.task_index,
                                 protocol="grpc", start=True)
    status.write(state="serving", server=server.target)
    while True:  # not server.join(): a Python wait lets the SIGTERM handler run
        time.sleep(3600)


class StepClock:
    """Per-worker step times of a ParameterServerStrategy fit, recorded on the workers themselves."""

    def __init__(self, strategy: Any, num_workers: int, steps_per_epoch: int, batch: int,
                 anchor: ClockAnchor) -> None:
        from perfkit._tf import tf

        t = tf()
        self.n, self.batch, self.anchor = num_workers, batch, anchor
        # One counter and one table per worker: each worker writes only its own, one step at a time (the
        # coordinator runs one closure per worker at once); an epoch holds at most steps_per_epoch steps.
        with strategy.scope():
            self.counts = [t.Variable(t.zeros([], t.int64), trainable=False, name=f"perfkit_steps_w{i}")
                           for i in range(num_workers)]
            self.times = [t.Variable(t.zeros([steps_per_epoch, 2], t.float64), trainable=False,
                                     name=f"perfkit_step_times_w{i}") for i in range(num_workers)]
        self.logs = [StepLog(samples_per_step=batch) for _ in range(num_workers)]
        for steplog in self.logs:
            steplog.anchor = anchor
        self._done = [0] * num_workers  # steps read in earlier epochs (status.json's running count)
        self.epoch = 0  # the epoch being run, for status.json

    def wrap(self, model: Any) -> None:
        """Time every training step of ``model`` on the worker that runs it."""
        from perfkit._tf import tf

        t = tf()
        original = model.train_step

        def record(i: int, start: Any, end: Any) -> Any:
            k = self.counts[i].read_value()
            row = t.stack([start, end])[None, :]
            with t.control_dependencies([self.times[i].scatter_nd_update(t.reshape(k, [1, 1]), row)]):
                return t.identity(self.counts[i].assign_add(1))

        def timed_step(data: Any) -> Any:
            worker = t.distribute.coordinator.experimental_get_current_worker_index()
            start = t.timestamp()
            with t.control_dependencies([start]):
                out = original(data)
            with t.control_dependencies(t.nest.flatten(out)):
                end = t.timestamp()
            branches = [lambda i=i: record(i, start, end) for i in range(self.n)]
            with t.control_dependencies([t.switch_case(t.cast(worker, t.int32), branches)]):
                return t.nest.map_structure(t.identity, out)

        model.train_step = timed_step

    def running_counts(self) -> list[int]:
        """Steps each worker ran so far in the current epoch, read live from the servers."""
        return [int(self.counts[i].numpy()) for i in range(self.n)]

    def collect(self, epoch: int) -> list[int]:
        """This epoch's steps of every worker into their StepLogs; the tables emptied for the next epoch.
        Called when Keras has joined every step of the epoch, so no worker is writing."""
        got = []
        for i in range(self.n):
            c = int(self.counts[i].numpy())
            rows = self.times[i].numpy()[:c]
            for k, (start, end) in enumerate(rows):
                self.logs[i].add_step(epoch, k, self._mono(start), self._mono(end))
            self.counts[i].assign(0)
            self._done[i] += c
            got.append(c)
        self.epoch = epoch + 1
        return got

    def _mono(self, wall_s: float) -> int:
        return self.anchor.mono_ns + (int(round(float(wall_s) * 1e9)) - self.anchor.wall_ns)

    def save(self, run_dir: Path, attempt: int) -> None:
        """Each worker's steps into its own ``workers/<i>/steps.parquet``, as a MWMS worker saves its own."""
        for i, steplog in enumerate(self.logs):
            wdir = run_dir / "workers" / str(i)
            wdir.mkdir(parents=True, exist_ok=True)
            write_parquet(wdir / "steps.parquet", steplog.steps_frame().assign(attempt=attempt))

    def callback(self, on_epoch: Callable[[int, list[int]], None]) -> Any:
        """The epoch-end reader (no batch hooks: ParameterServerStrategy refuses them)."""
        from perfkit._tf import keras

        clock = self

        class _Collect(keras().callbacks.Callback):
            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                on_epoch(epoch, clock.collect(epoch))

        return _Collect()


def progress(clock: StepClock, status: Any, stop: threading.Event) -> threading.Thread:
    """A thread writing the running step count into the chief's status.json about once a second: the
    launcher's progress display and its stall check (the chief gets no batch callback)."""
    def loop() -> None:
        while not stop.wait(PROGRESS_S):
            try:
                counts = clock.running_counts()
            except Exception as exc:  # noqa: BLE001 - a lost server: the launcher sees its process die
                log.warning("could not read the step counters: %s", exc)
                return
            status.write(force=False, epoch=clock.epoch, step=sum(counts), steps_per_worker=counts,
                         t_progress=time.time())

    thread = threading.Thread(target=loop, name="perfkit-ps-progress", daemon=True)
    thread.start()
    return thread


def train_chief(run_dir: Path, cfg: Any, cluster: ClusterSpec, launch: dict[str, Any], status: Any,
                steplog: StepLog, save: Callable[[], None]) -> None:
    """The chief's part of a ParameterServerStrategy run: join the cluster and fit, every worker's steps
    timed by a StepClock and saved in the worker's own folder after every epoch."""
    from perfkit.trainer.worker.fit import Instruments, fit
    from perfkit.trainer.worker.part import StatusObserver
    from perfkit.trainer.worker.strategy import parameter_server
    from perfkit.workloads import prepare_workload, resolve

    status.write(state="loading-data")
    workload = resolve(cfg)  # the user named it: importing their module here is what they asked for
    prepare_workload(workload, cfg.workload, Path(launch["cache_dir"]), trains_here=False)
    status.write(state="connecting")
    strategy, info = parameter_server(cluster.num_ps)
    status.write(state="joined", replicas=cluster.num_workers, strategy=info.name)
    attempt = int(launch.get("attempt", 0))
    clocks: list[StepClock] = []  # the one StepClock, once the model is built
    stop = threading.Event()

    def save_all() -> None:
        for clock in clocks:
            clock.save(run_dir, attempt)
        save()

    def on_model(model: Any, plan: Any) -> list[Any]:
        clock = StepClock(strategy, cluster.num_workers, plan.steps_per_epoch, cfg.batch_size, steplog.anchor)
        clock.wrap(model)
        clocks.append(clock)
        progress(clock, status, stop)
        return [clock.callback(lambda epoch, counts: status.write(steps_per_worker=counts))]

    try:
        fit(cfg, workload, strategy, steplog, StatusObserver(status, save_all), cpu=lambda: None, num_workers=1,
            on_model=on_model, instruments=Instruments(scalars_dir=run_dir / "tensorboard" / "chief"))
    finally:
        stop.set()
