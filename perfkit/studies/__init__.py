"""Studies: commands that run several runs and compare them, above the trainer (which runs one) and the
analysis (which reads them). ``tune`` (advice tried), ``sweep`` (the scaling curve), ``overhead`` and
``faults`` (``perfkit check``), and ``rounds``, the one loop of rounds they share with the benchmarks."""
