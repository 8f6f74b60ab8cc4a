"""Benchmarks: figures measured against a baseline; run as `python -m bench.benchmarks.<name>`."""
