"""Overhead of the device timeline (torch.openreg.trace) on a small-op loop.

    python -m bench.benchmarks.trace_overhead_bench [--ops 2000] [--rounds 7]

The same loop of small elementwise ops (16 to 1024 elements, issue and wait) runs with and without a
trace, alternating, in one process; the figure is best-with / best-without - 1 (target <= 10%).
Prints a table and writes bench/results/trace_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import torch


def small_op_loop(ops: int) -> float:
    xs = [torch.randn(n, device="openreg:0") for n in (16, 256, 1024)]
    torch.openreg.synchronize()
    t0 = time.perf_counter()
    for i in range(ops):
        x = xs[i % 3]
        torch.add(x, x)
    torch.openreg.synchronize()
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description="trace overhead on small ops")
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                      "results", "trace_overhead.json"))
    args = parser.parse_args()
    small_op_loop(args.ops)  # warm-up: allocator cache, meta cache
    plain, traced, items = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            plain.append(small_op_loop(args.ops))
            with torch.openreg.trace(os.path.join(tmp, f"r{r}.json")) as t:
                traced.append(small_op_loop(args.ops))
            items = len(t.records)
    best_plain, best_traced = min(plain), min(traced)
    overhead = best_traced / best_plain - 1.0
    result = {"ops": args.ops, "rounds": args.rounds, "items_recorded": items,
              "us_per_op_plain": best_plain / args.ops * 1e6, "us_per_op_traced": best_traced / args.ops * 1e6,
              "overhead": overhead, "target": 0.10}
    print(f"{'loop':<10} {'us/op (best of %d)' % args.rounds:>20}")
    print(f"{'plain':<10} {result['us_per_op_plain']:>20.2f}")
    print(f"{'traced':<10} {result['us_per_op_traced']:>20.2f}   ({items} items recorded)")
    print(f"trace overhead: {overhead * 100:+.1f}%  (target <= +10%)")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    if items < args.ops:
        print("error: the trace recorded fewer items than ops were issued", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
