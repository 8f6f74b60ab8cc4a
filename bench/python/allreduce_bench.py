"""all_reduce of 1-64 MiB: openreg tensors (openreg backend) vs CPU tensors (gloo), same run.

Spawns 2 processes on loopback; prints a table and writes JSON (--json PATH, default stdout only).
Usage: python bench/python/allreduce_bench.py [--iters N] [--json out.json]
"""

import argparse
import json
import os
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
SIZES_MIB = [1, 4, 16, 64]


def _worker(rank, port, iters, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(rank=rank, world_size=WORLD, timeout=timedelta(seconds=120))
    dev = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(dev)
    rows = []
    for mib in SIZES_MIB:
        n = mib * 1024 * 1024 // 4
        row = {"size_mib": mib}
        for name, device in (("openreg", dev), ("gloo_cpu", torch.device("cpu"))):
            t = torch.ones(n, device=device)
            dist.all_reduce(t)  # warm-up
            torch.openreg.synchronize(dev)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            torch.openreg.synchronize(dev)
            row[f"{name}_ms"] = (time.perf_counter() - start) / iters * 1e3
        row["ratio"] = row["gloo_cpu_ms"] / row["openreg_ms"]
        rows.append(row)
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, args.iters, queue)) for r in range(WORLD)]
    for p in procs:
        p.start()
    rows = queue.get(timeout=600)
    for p in procs:
        p.join(60)
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
