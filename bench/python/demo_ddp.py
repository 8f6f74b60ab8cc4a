"""DDP over 2 processes (one openreg device each) beside single-process training on the whole batch.

Prints per-epoch losses of both runs; they agree because DDP averages the gradients of the two halves.
Usage: python bench/python/demo_ddp.py [--epochs N]
"""

import argparse
import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD = 2


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


def _worker(rank, port, epochs, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(rank=rank, world_size=WORLD, timeout=timedelta(seconds=60))
    dev = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(dev)
    x, y = _data()
    half = x.shape[0] // WORLD
    xs, ys = x[rank * half:(rank + 1) * half].to(dev), y[rank * half:(rank + 1) * half].to(dev)
    model = DDP(_model().to(dev))

    def full_batch_loss(loss):
        t = loss.detach().clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.item() / WORLD

    losses = _train(model, xs, ys, epochs, full_batch_loss)
    if rank == 0:
        queue.put(losses)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, args.epochs, queue)) for r in range(WORLD)]
    for p in procs:
        p.start()
    ddp_losses = queue.get(timeout=300)
    for p in procs:
        p.join(60)
    x, y = _data()
    single = _train(_model().to("openreg:0"), x.to("openreg:0"), y.to("openreg:0"), args.epochs,
                    lambda loss: loss.item())
    print("DDP over 2 processes (openreg, backend 'openreg' over gloo) vs 1 process, whole batch")
    print(f"{'epoch':>5} {'DDP loss':>12} {'single loss':>12}")
    for i, (a, b) in enumerate(zip(ddp_losses, single)):
        print(f"{i:>5} {a:>12.6f} {b:>12.6f}")
    worst = max(abs(a - b) for a, b in zip(ddp_losses, single))
    print(f"largest difference: {worst:.2e}")
    if worst > 1e-4:
        raise SystemExit("DDP and single-process losses differ")


if __name__ == "__main__":
    main()
