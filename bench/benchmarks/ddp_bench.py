"""A DDP training step over 2 processes: openreg (one device each, backend 'openreg') vs CPU (gloo), same run.

Each rank trains the same MLP (tests/support/ddp_overlap.py: 6 hidden layers of 256) on its half of the
batch; a step is forward, backward with DDP's gradient all-reduce, SGD and, on openreg, a device
synchronize. Rows: DDP's default buckets (25 MiB: one bucket for this model, all-reduced when backward
ends) and small buckets (one layer each: the all-reduces start during backward). Then rank 0 traces one
backward with small buckets and reports how much of the all-reduce time ran beside backward kernels
(--trace PATH writes that timeline as Chrome trace JSON).

Prints a table and writes JSON (--json, default bench/results/ddp_bench.json).
Usage: python -m bench.benchmarks.ddp_bench [--steps N] [--batch N] [--json PATH] [--trace PATH]
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from tests.support import ddp_overlap, spawn

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(os.path.dirname(HERE))


def _time_steps(model, x, y, steps, sync) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        sync()

    for _ in range(3):  # warm-up; DDP rebuilds its buckets after the first step
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


def _worker(rank, steps, batch, trace_path):
    dev = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(dev)
    gloo = dist.new_group(backend="gloo")  # the reference: DDP on CPU tensors over gloo itself
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(batch // 2, 256, generator=g), torch.randn(batch // 2, 1, generator=g)
    small = ddp_overlap.bucket_cap_mb_for(ddp_overlap.deep_mlp())
    rows = []
    for buckets, cap in (("default (25 MiB)", 25.0), ("one layer each", small)):
        row = {"buckets": buckets, "bucket_cap_mb": cap}
        for name, device, group in (("openreg", dev, None), ("gloo_cpu", torch.device("cpu"), gloo)):
            model = DDP(ddp_overlap.deep_mlp().to(device), bucket_cap_mb=cap, process_group=group)
            dist.barrier(group=gloo)
            row[f"{name}_ms"] = _time_steps(model, x.to(device), y.to(device), steps,
                                            (lambda: torch.openreg.synchronize(dev)) if device == dev else (lambda: None))
        row["ratio"] = row["gloo_cpu_ms"] / row["openreg_ms"]
        rows.append(row)
    model = DDP(ddp_overlap.deep_mlp().to(dev), bucket_cap_mb=small)
    xd, yd = x.to(dev), y.to(dev)
    ddp_overlap.traced_backward(model, xd, yd, dev)  # buckets rebuilt after the first backward
    records = ddp_overlap.traced_backward(model, xd, yd, dev, trace_path if rank == 0 else None)
    return {"rows": rows, "overlap": vars(ddp_overlap.overlap(records, dev.index))}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=512, help="global batch (half per rank)")
    parser.add_argument("--json", default=os.path.join(CHECKOUT, "bench", "results", "ddp_bench.json"))
    parser.add_argument("--trace", default=None, help="write rank 0's timeline of one traced backward here")
    args = parser.parse_args()
    for path in (args.json, args.trace):
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    result = spawn.run(_worker, args.steps, args.batch, args.trace, timeout_s=600, pg_timeout_s=120)[0]
    rows, o = result["rows"], ddp_overlap.Overlap(**result["overlap"])
    print(f"DDP step over {spawn.WORLD} processes, MLP 256x6, global batch {args.batch}, mean of {args.steps} steps")
    print(f"{'buckets':>18} {'openreg ms':>11} {'gloo-CPU ms':>12} {'openreg speed vs CPU':>21}")
    for r in rows:
        print(f"{r['buckets']:>18} {r['openreg_ms']:>11.2f} {r['gloo_cpu_ms']:>12.2f} {r['ratio']:>20.2f}x")
    print(f"rank 0, one backward with one-layer buckets: {o.describe()}")
    out = {"world_size": spawn.WORLD, "steps": args.steps, "batch": args.batch, "rows": rows, "overlap": vars(o)}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
