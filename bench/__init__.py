"""Benchmark scripts; run as ``python -m bench.<name>``, never by the test suite."""
