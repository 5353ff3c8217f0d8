"""The ps-clock benchmark's side without perfkit's step clock: perfkit's built-in workload trained under
ParameterServerStrategy with no instrument (``perfkit.trainer.worker.bare``'s training: the same data cache,
pipeline, model and ``fit`` arguments as ``perfkit run --mode ps``), shaped as TensorFlow's tutorial runs a
parameter-server script, one program per task: workers and parameter servers serve, the chief trains and
prints its result line (``bare.emit``). ``perfkit launch --mode ps --no-auto-record`` runs it, so the
cluster's servers live in the launcher's private network like perfkit's own.

    perfkit launch --mode ps --workers 2 --no-auto-record --no-profile -- \\
        python -m benchmarks._ps_bare --preset tiny --cache-dir results/datasets
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from perfkit.config import PRESETS, Mode, RunConfig
from perfkit.trainer.worker.bare import emit, train
from perfkit.workloads.botdetector.params import configure


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks._ps_bare", description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=list(PRESETS), default="quick")
    p.add_argument("--cache-dir", type=Path, default=Path("results/datasets"))
    p.add_argument("--train-players", type=int, default=None, help="override the preset's (as perfkit run)")
    p.add_argument("--test-players", type=int, default=None, help="override the preset's (as perfkit run)")
    args = p.parse_args(argv)

    from perfkit._tf import tf

    t = tf()
    resolver = t.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        os.environ["GRPC_FAIL_FAST"] = "use_caller"  # the tutorial's setting
        server = t.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                     task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc", start=True)
        server.join()  # until the launcher stops the job
        return 0
    cfg = configure(RunConfig.from_preset(Mode.ps, args.preset), train_players=args.train_players,
                    test_players=args.test_players)
    emit(train(cfg, args.cache_dir, t.distribute.ParameterServerStrategy(resolver)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
