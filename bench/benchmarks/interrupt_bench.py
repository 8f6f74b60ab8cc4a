"""Ctrl-C latency of host waits: the time from SIGINT to KeyboardInterrupt in a process waiting for
seconds of queued openreg work (Note [Interruptible host waits] in sim/src/host_wait.cpp).

Each wait kind runs in fresh processes: the child queues about 3 s of matmuls, prints "waiting" and
waits; the parent sends SIGINT 0.3 s later and times the child's "interrupted" line. CUDA's waits
ignore SIGINT until the device is done, so there is no baseline to divide by: the figure is the latency.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench.common.bench_table import print_table
from tests.support import interrupt_child

WAITS = {
    "torch.openreg.synchronize()": "torch.openreg.synchronize()",
    "Event.synchronize()": "done.synchronize()",
    "Tensor.item()": "y.sum().item()",
    "Tensor.cpu()": "y.cpu()",
}


def latency_ms(wait: str) -> float:
    child = interrupt_child.start(wait)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "waiting"
        sent = interrupt_child.interrupt(child)
        line = child.stdout.readline().strip()
        took = (time.perf_counter() - sent) * 1e3
        child.communicate(timeout=120)
    finally:
        child.kill()
    if not line.startswith("interrupted"):
        raise RuntimeError(f"{wait}: the child printed {line!r}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per wait kind")
    parser.add_argument("--out", help="JSON file for the results")
    args = parser.parse_args()
    rows = []
    for name, wait in WAITS.items():
        times = [latency_ms(wait) for _ in range(args.runs)]
        rows.append({"wait": name, "min ms": f"{min(times):.1f}", "median ms": f"{statistics.median(times):.1f}",
                     "max ms": f"{max(times):.1f}", "raw": times})
    print_table([{k: v for k, v in r.items() if k != "raw"} for r in rows], align="<")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"runs": args.runs, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()
