"""Demos: what a user runs to see the product (`make demo`); run as `python -m bench.demos.<name>`."""
