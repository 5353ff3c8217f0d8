"""perfkit's benchmarks: ``python -m perfkit.bench NAME [options]`` or ``perfkit bench NAME [options]``.

Each writes ``results/bench/<name>-<UTC time>.json`` and prints a Markdown table; ``--smoke`` is the
smallest version (the test suite runs only that). None of them runs in the test suite otherwise.
"""

from __future__ import annotations

# name -> (module, one line). Modules are imported only when run: most of them start TensorFlow children.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "overhead": ("perfkit.bench.overhead", "instrumentation overhead: bare vs fully instrumented single mode"),
    "trainer": ("perfkit.bench.trainer", "perfkit's trainer vs the article's script; achieved vs matmul FLOP/s"),
    "multiworker": ("perfkit.bench.multiworker", "2 and 4 local workers, pinned vs not, against single"),
    "datagen": ("perfkit.bench.datagen", "generating the blog-size dataset: time and peak RSS"),
    "analysis-speed": ("perfkit.bench.analysis_speed", "perfkit analyze of 4 and 16 generated workers: time, RSS"),
    "analysis": ("perfkit.bench.analysis_speed", "the same as analysis-speed (its former name)"),
    "article": ("perfkit.bench.article", "the article's experiment (blog single vs blog cluster) beside the article"),
    "trace-reliability": ("perfkit.bench.trace_reliability", "how often multi-worker runs keep every worker's trace"),
    "separability": ("perfkit.bench.separability", "how separable the synthetic data is with and without time"),
    "allreduce": ("perfkit.bench.allreduce", "isolated all-reduce of the model's gradients between N one-core workers"),
    "whatif": ("perfkit.bench.whatif", "unequal emulated clusters: the equal-workers prediction against running it"),
    "ps-clock": ("perfkit.bench.ps_clock", "--mode ps: epoch time with and without the per-worker step clock"),
    "network": ("perfkit.bench.network", "2 emulated hosts, links from unshaped to 20 Mbit/s: the transfer term per step"),
    "tune": ("perfkit.bench.tune", "perfkit tune on 2 and 4 local workers and the README's cluster: advice tried"),
    "healthy": ("perfkit.bench.healthy", "healthy runs of several shapes launched N times: false failures, time to exit"),
    "faults": ("perfkit.bench.faults", "hangs, cut links, full disk, killed launcher: time to name each, named right"),
    "scaling": ("perfkit.bench.scaling", "the sweep forecast out of sample: fitted on 1, 2, 4 emulated workers, then 8 run"),
    "startup": ("perfkit.bench.startup", "command to first step: 1 process against 4 and 8 local workers"),
    "hosts": ("perfkit.bench.hosts", "your script on 2 SSH hosts vs one machine: command to first step, records back"),
    "autorecord": ("perfkit.bench.autorecord", "perfkit launch of unmodified tutorial scripts vs running them bare"),
}
