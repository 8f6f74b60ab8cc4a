"""The Python benchmarks, sweeps and demos, run as modules from the checkout's root:

    python -m bench.demos.demo                                  # make demo
    python -m bench.benchmarks.ops_bench --out bench/results/ops_bench.json

* bench/demos: what a user runs to see the product (`make demo`).
* bench/sweeps: runs over many ops, configurations or rows (the OpInfo sweep, the timing model's and the
  collectives' published figures, the calibration rows, symmetric-rank mode's ranks, the stress run's seeds).
* bench/benchmarks: figures measured against a baseline (CPU eager, gloo, the same work without a feature).
* bench/common: what they share (child processes, tables, workloads, timeline pictures).

They import each other and the test helpers as packages (``from bench.common import bench_table``,
``from tests.support import spawn``); the checkout's root is on the import path because `python -m`
puts the working directory there. bench/sim holds the sim's C++ benchmarks; bench/results their outputs.
"""
