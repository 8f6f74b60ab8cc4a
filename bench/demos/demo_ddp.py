"""DDP over 2 processes (one openreg device each) beside single-process training on the whole batch.

Prints per-epoch losses of both runs; they agree because DDP averages the gradients of the two halves.
Also prints the time of a DDP step (mean over --steps steps after training, each ending with a device
synchronize), and the overlap of DDP's gradient all-reduce with backward: rank 0 traces one backward of
a deeper model (tests/support/ddp_overlap.py) with one layer per bucket, whose all-reduces run on the
device's communication lane while the remaining backward kernels run on its compute stream. With
--trace PATH that timeline is written as Chrome trace JSON.
Usage: python -m bench.demos.demo_ddp [--epochs N] [--steps N] [--trace PATH]
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from tests.support import ddp_overlap, spawn

WORLD = spawn.WORLD


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


def _data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 16, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


def _train(model, x, y, epochs, loss_of_full_batch):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss_of_full_batch(loss))
    return losses


def _worker(rank, epochs, steps, trace_path, bucket_cap_mb):
    dev = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(dev)
    x, y = _data()
    half = x.shape[0] // WORLD
    xs, ys = x[rank * half:(rank + 1) * half].to(dev), y[rank * half:(rank + 1) * half].to(dev)
    model = DDP(_model().to(dev), bucket_cap_mb=bucket_cap_mb)

    def full_batch_loss(loss):
        t = loss.detach().clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.item() / WORLD

    losses = _train(model, xs, ys, epochs, full_batch_loss)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
        torch.openreg.synchronize(dev)

    step_ms = None
    if steps:
        step()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        step_ms = (time.perf_counter() - start) / steps * 1e3
    # The overlap: a deeper model, one layer per bucket, one traced backward (after the one in which
    # DDP rebuilds its buckets).
    deep = ddp_overlap.deep_mlp()
    deep_ddp = DDP(deep.to(dev), bucket_cap_mb=ddp_overlap.bucket_cap_mb_for(deep))
    g = torch.Generator().manual_seed(rank)
    dx, dy = torch.randn(256, 256, generator=g).to(dev), torch.randn(256, 1, generator=g).to(dev)
    ddp_overlap.traced_backward(deep_ddp, dx, dy, dev)
    records = ddp_overlap.traced_backward(deep_ddp, dx, dy, dev, trace_path if rank == 0 else None)
    return losses, step_ms, ddp_overlap.overlap(records, dev.index)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="timed DDP steps after training (0: none)")
    parser.add_argument("--trace", default=None, help="write rank 0's timeline of one step here")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    args = parser.parse_args()
    ddp_losses, step_ms, overlap = spawn.run(_worker, args.epochs, args.steps, args.trace, args.bucket_cap_mb,
                                             timeout_s=300, pg_timeout_s=60)[0]
    x, y = _data()
    single = _train(_model().to("openreg:0"), x.to("openreg:0"), y.to("openreg:0"), args.epochs,
                    lambda loss: loss.item())
    print("DDP over 2 processes (openreg, backend 'openreg' over gloo) vs 1 process, whole batch")
    print(f"{'epoch':>5} {'DDP loss':>12} {'single loss':>12}")
    for i, (a, b) in enumerate(zip(ddp_losses, single)):
        print(f"{i:>5} {a:>12.6f} {b:>12.6f}")
    worst = max(abs(a - b) for a, b in zip(ddp_losses, single))
    print(f"largest difference: {worst:.2e}")
    if step_ms is not None:
        print(f"DDP step (forward, backward with gradient all-reduce, SGD step, synchronize): {step_ms:.2f} ms")
    print(f"overlap, rank 0, one backward with one layer per bucket: {overlap.describe()}")
    if args.trace:
        print(f"its device timeline: {args.trace}")
    if worst > 1e-4:
        raise SystemExit("DDP and single-process losses differ")


if __name__ == "__main__":
    main()
