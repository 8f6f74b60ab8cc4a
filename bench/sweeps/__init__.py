"""Sweeps over many ops, configurations or rows; run as `python -m bench.sweeps.<name>`."""
