"""Analysis of frozen runs: load -> DataFrames -> figures -> renderers. Data flows one way.

- ``load``: run directories (and parts of one run from several hosts) -> ``LoadedRun`` (schema-checked
  DataFrames on one wall clock, problems and warnings listed, never dropped silently);
- ``select``: the baseline and the runs left out, with the reason;
- ``summary``, ``cpu``, ``stragglers``: per-run figures (docs/figures.md); ``analyze``: all of them
  and the baseline-relative ones as an ``Analysis``; ``verdict``: sentences generated from the numbers;
- ``report_console`` (rich), ``report_html`` (plotly, imported lazily), ``report_json`` (JSON, CSV, and
  the documentation of every JSON key): renderers, the only modules that format or plot;
- ``synthetic``: large runs in the on-disk format, for benchmarks.

Analysers never print, plot or exit; nothing here imports TensorFlow.
"""
