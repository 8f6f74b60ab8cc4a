"""all_reduce of 1-64 MiB: openreg tensors (openreg backend) vs CPU tensors (a plain gloo group), same run.

openreg's time includes its stream ordering (an event on the current stream, the communication
thread, the host-completed end the stream waits on) and ends with a device synchronize.

Spawns 2 processes on loopback; prints a table and writes JSON (--json PATH, default stdout only).
Usage: python -m bench.benchmarks.allreduce_bench [--iters N] [--json out.json]
"""

import argparse
import json
import time

import torch
import torch.distributed as dist

from tests.support import spawn

WORLD = spawn.WORLD
SIZES_MIB = [1, 4, 16, 64]


def _worker(rank, iters):
    dev = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(dev)
    gloo = dist.new_group(backend="gloo")  # the reference: gloo itself on CPU tensors
    rows = []
    for mib in SIZES_MIB:
        n = mib * 1024 * 1024 // 4
        row = {"size_mib": mib}
        for name, device, group in (("openreg", dev, None), ("gloo_cpu", torch.device("cpu"), gloo)):
            t = torch.ones(n, device=device)
            dist.all_reduce(t, group=group)  # warm-up
            torch.openreg.synchronize(dev)
            dist.barrier(group=gloo)
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t, group=group)
            torch.openreg.synchronize(dev)
            row[f"{name}_ms"] = (time.perf_counter() - start) / iters * 1e3
        row["ratio"] = row["gloo_cpu_ms"] / row["openreg_ms"]
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = spawn.run(_worker, args.iters, timeout_s=600, pg_timeout_s=120)[0]
    print(f"{'size MiB':>8} {'openreg ms':>11} {'gloo-CPU ms':>12} {'openreg speed vs gloo':>22}")
    for r in rows:
        print(f"{r['size_mib']:>8} {r['openreg_ms']:>11.2f} {r['gloo_cpu_ms']:>12.2f} {r['ratio']:>21.2f}x")
    result = {"world_size": WORLD, "iters": args.iters, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
