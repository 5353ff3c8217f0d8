"""perfkit's benchmarks: ``python -m benchmarks NAME [options]``, run from the root of perfkit's source
checkout (they are not part of the installed package: ``pip install .`` ships none of them).

Each writes ``results/bench/<name>-<UTC time>.json`` and prints a Markdown table; ``--smoke`` is the
smallest version (the test suite runs only that). None of them runs in the test suite otherwise.
"""

from __future__ import annotations

# name -> (module, one line). Modules are imported only when run: most of them start TensorFlow children.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "overhead": ("benchmarks.overhead", "instrumentation overhead: bare vs fully instrumented single mode"),
    "trainer": ("benchmarks.trainer", "perfkit's trainer vs the article's script; achieved vs matmul FLOP/s"),
    "multiworker": ("benchmarks.multiworker", "2 and 4 local workers, pinned vs not, against single"),
    "datagen": ("benchmarks.datagen", "generating the blog-size dataset: time and peak RSS"),
    "analysis-speed": ("benchmarks.analysis_speed", "perfkit analyze of 4 and 16 generated workers: time, RSS"),
    "analysis": ("benchmarks.analysis_speed", "the same as analysis-speed (its former name)"),
    "engines": ("benchmarks.engines", "one run's CPU figures by pandas, Polars and DuckDB: time, RSS, agreement"),
    "article": ("benchmarks.article", "the article's experiment (blog single vs blog cluster) beside the article"),
    "trace-reliability": ("benchmarks.trace_reliability", "how often multi-worker runs keep every worker's trace"),
    "separability": ("benchmarks.separability", "how separable the synthetic data is with and without time"),
    "allreduce": ("benchmarks.allreduce", "isolated all-reduce of the model's gradients between N one-core workers"),
    "whatif": ("benchmarks.whatif", "unequal emulated clusters: the equal-workers prediction against running it"),
    "ps-clock": ("benchmarks.ps_clock", "--mode ps: epoch time with and without the per-worker step clock"),
    "network": ("benchmarks.network", "2 emulated hosts, links from unshaped to 20 Mbit/s: the transfer term per step"),
    "tune": ("benchmarks.tune", "perfkit tune on 2 and 4 local workers and the README's cluster: advice tried"),
    "healthy": ("benchmarks.healthy", "healthy runs of several shapes launched N times: false failures, time to exit"),
    "faults": ("benchmarks.faults", "hangs, cut links, full disk, killed launcher: time to name each, named right"),
    "scaling": ("benchmarks.scaling",
                "the sweep forecast out of sample: fitted on 1, 2, 4 emulated workers, then 8 run"),
    "startup": ("benchmarks.startup", "command to first step: 1 process against 4 and 8 local workers"),
    "hosts": ("benchmarks.hosts", "your script on 2 SSH hosts vs one machine: command to first step, records back"),
    "autorecord": ("benchmarks.autorecord", "perfkit launch of unmodified tutorial scripts vs running them bare"),
    "watch-alarm": ("benchmarks.watch_alarm", "perfkit watch naming a worker whose budget is cut mid-run; false flags"),
}
