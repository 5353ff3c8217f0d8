"""Analysis of frozen runs: load -> DataFrames -> figures -> renderers. Data flows one way.

- ``load``: run directories (and parts of one run from several hosts) -> ``LoadedRun`` (schema-checked
  DataFrames on one wall clock, problems and warnings listed, never dropped silently);
- ``select``: the baseline and the runs left out, with the reason;
- ``summary``, ``cpu``, ``stragglers``: per-run figures (docs/figures.md); ``analyze``: all of them
  and the baseline-relative ones as an ``Analysis``; ``verdict``: sentences generated from the numbers;
- ``tracetables``: the profiler captures parsed into trace tables, cached beside the run;
- ``renderers``: one family with one signature, ``render(analysis, out, options)``: ``console`` (rich),
  ``html`` (plotly, imported lazily), ``json`` (and the documentation of every JSON key), ``csv``: the
  only modules that format or plot.

Analysers never print, plot or exit; nothing here imports TensorFlow.
"""
