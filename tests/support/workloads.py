"""Training workloads on openreg, used by the tests (tests/python/test_workloads.py) and the demo
(bench/demos/demo.py). Each returns
per-epoch losses so runs can be compared with the CPU.

* train_single       - one device, the usual loop.
* train_data_parallel - one replica per device in one process; each replica's forward/backward on its
                        own stream; gradients (one flat buffer per replica) averaged with peer copies
                        ordered by events; one optimizer step per replica.
* train_pipeline     - the model split in two stages over two devices; activations and gradients cross
                        with peer copies, ordered by events between the stages' streams.

Every function is deterministic for a given seed, and their CPU counterparts (device="cpu", or
train_single on "cpu") produce the same losses up to float rounding.
"""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass
from typing import List, Sequence

import torch
from torch import nn


@dataclass
class Result:
    losses: List[float]         # mean loss of each epoch
    step_seconds: float         # wall time per optimizer step (all replicas), excluding epoch 0
    models: List[nn.Module]     # the trained model(s): one per replica or stage


def make_data(seed: int = 0, samples: int = 512, features: int = 32, classes: int = 4):
    """A synthetic classification set: a fixed random linear teacher labels Gaussian inputs."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    teacher = torch.randn(features, classes, generator=g)
    y = (x @ teacher + 0.1 * torch.randn(samples, classes, generator=g)).argmax(dim=1)
    return x, y


def make_model(seed: int = 0, features: int = 32, hidden: int = 64, classes: int = 4) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, classes))


def _batches(x, y, batch: int):
    for i in range(0, x.shape[0] - batch + 1, batch):
        yield x[i:i + batch], y[i:i + batch]


def _epoch_means(step_losses: List[torch.Tensor], steps_per_epoch: int) -> List[float]:
    values = torch.stack([l.detach().float().cpu() for l in step_losses])  # one synchronization
    return values.view(-1, steps_per_epoch).mean(dim=1).tolist()


def _pinned(x, y, device: str):
    """The data in pinned memory when it goes to an openreg device, so batches copy with non_blocking=True
    and the host never waits for the device between steps (as a DataLoader with pin_memory=True)."""
    if torch.device(device).type == "openreg":
        return x.pin_memory(), y.pin_memory()
    return x, y


def train_single(model: nn.Module, x, y, device: str, epochs: int = 3, batch: int = 64, lr: float = 0.05,
                 optimizer: str = "sgd") -> Result:
    """Plain training on one device (also the CPU reference)."""
    model = copy.deepcopy(model).to(device)
    opt = _optimizer(optimizer, model.parameters(), lr)
    loss_fn = nn.CrossEntropyLoss()
    x, y = _pinned(x, y, device)

    def step(xb, yb):
        xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    return _train(x, y, epochs, batch, lambda: _sync(device), step, [model])


def train_data_parallel(model: nn.Module, x, y, devices: Sequence[str], epochs: int = 3, batch: int = 64,
                        lr: float = 0.05, optimizer: str = "sgd") -> Result:
    """Data parallel in one process: the batch is split over `devices` (each shard `batch/len(devices)`).

    Each replica's gradients live in one flat buffer (every parameter's .grad is a view of it, and
    backward accumulates into it in place), so averaging moves one buffer per replica instead of one
    tensor per parameter (Note [Flat gradient buffers])."""
    devs = [torch.device(d) for d in devices]
    n = len(devs)
    assert batch % n == 0, "batch must split evenly over the devices"
    replicas = [copy.deepcopy(model).to(d) for d in devs]
    opts = [_optimizer(optimizer, r.parameters(), lr) for r in replicas]
    streams = [torch.openreg.Stream(d) for d in devs]
    flats = []
    for r, s in zip(replicas, streams):
        with torch.openreg.stream(s):  # the buffer is used on the replica's stream only
            flats.append(_flat_grads(list(r.parameters())))
    loss_fn = nn.CrossEntropyLoss()
    shard = batch // n
    x, y = _pinned(x, y, devices[0])

    def step(xb, yb):
        done = []
        step_loss = []
        for i, (d, s, r, f) in enumerate(zip(devs, streams, replicas, flats)):
            with torch.openreg.stream(s):
                xs = xb[i * shard:(i + 1) * shard].to(d, non_blocking=True)
                ys = yb[i * shard:(i + 1) * shard].to(d, non_blocking=True)
                f.zero_()  # the gradients, all at once (zero_grad would drop the views)
                loss = loss_fn(r(xs), ys)
                loss.backward()
                ev = torch.Event(device=d)
                ev.record(s)
                done.append(ev)
                step_loss.append(loss)
        _average_gradients(flats, devs, streams, done)
        for s, o in zip(streams, opts):
            with torch.openreg.stream(s):
                o.step()
        with _current(streams):
            return sum(l.to(devs[0]) for l in step_loss) / n

    return _train(x, y, epochs, batch, lambda: _sync_all(devs), step, replicas)


# Note [Flat gradient buffers]
# AccumulateGrad adds into an existing .grad in place, so parameters whose .grad are views of one
# zeroed buffer get their gradients written straight into it: the all-reduce then needs one peer copy
# per replica each way and one add per replica, not four ops per parameter, which made the averaging
# (host-bound: a few microseconds of issue each) most of a small model's data-parallel step. The sums
# are the same elementwise additions in the same order, so losses are unchanged.
def _flat_grads(params) -> torch.Tensor:
    flat = torch.zeros(sum(p.numel() for p in params), device=params[0].device, dtype=params[0].dtype)
    offset = 0
    for p in params:
        p.grad = flat[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    return flat


def _average_gradients(flats, devs, streams, done_events) -> None:
    """All-reduce (mean) of the replicas' flat gradient buffers through device 0.

    Device 0's stream waits for every replica's backward (events), gathers their gradients with one
    peer copy each, averages, and broadcasts back; each replica's stream waits on an event recorded
    after the broadcast, so its optimizer step sees the averaged gradient.
    """
    root, root_stream = devs[0], streams[0]
    n = len(devs)
    for ev in done_events[1:]:
        root_stream.wait_event(ev)
    with _current(streams):
        total = flats[0]
        for f in flats[1:]:
            total.add_(f.to(root, non_blocking=True))
        total.mul_(1.0 / n)
        reduced = torch.Event(device=root)
        reduced.record(root_stream)
    for i in range(1, n):
        streams[i].wait_event(reduced)
        with torch.openreg.stream(streams[i]), torch.openreg.stream(root_stream):
            flats[i].copy_(total, non_blocking=True)


def train_pipeline(model: nn.Sequential, x, y, devices: Sequence[str], split: int, epochs: int = 3,
                   batch: int = 64, lr: float = 0.05, optimizer: str = "sgd") -> Result:
    """Model parallel: layers [0, split) on devices[0], the rest on devices[1], one stream per stage."""
    d0, d1 = (torch.device(d) for d in devices)
    stage0 = copy.deepcopy(model[:split]).to(d0)
    stage1 = copy.deepcopy(model[split:]).to(d1)
    s0, s1 = torch.openreg.Stream(d0), torch.openreg.Stream(d1)
    params = list(stage0.parameters()) + list(stage1.parameters())
    opt = _optimizer(optimizer, params, lr)
    loss_fn = nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        with torch.openreg.stream(s0):
            h = stage0(xb.to(d0, non_blocking=True))
            ready = torch.Event(device=d0)
            ready.record(s0)
        s1.wait_event(ready)
        with torch.openreg.stream(s1), torch.openreg.stream(s0):
            h1 = h.to(d1)            # autograd carries the gradient back across the copy
            loss = loss_fn(stage1(h1), yb.to(d1, non_blocking=True))
            loss.backward()
            back = torch.Event(device=d1)
            back.record(s1)
        s0.wait_event(back)
        with torch.openreg.stream(s0), torch.openreg.stream(s1):
            opt.step()
        return loss

    return _train(x, y, epochs, batch, lambda: _sync_all([d0, d1]), step, [stage0, stage1])


def _train(x, y, epochs: int, batch: int, sync, step, models) -> Result:
    """Runs `step(xb, yb) -> loss` over every batch of every epoch. Epoch 0 warms up; the time per step
    is measured over the rest, between two calls of `sync`."""
    losses, t_start, steps = [], None, 0
    for epoch in range(epochs):
        if epoch == 1:
            sync()
            t_start = time.perf_counter()
        for xb, yb in _batches(x, y, batch):
            losses.append(step(xb, yb))
            steps += epoch >= 1
    sync()
    elapsed = time.perf_counter() - t_start if t_start is not None else 0.0
    return Result(_epoch_means(losses, len(losses) // epochs), elapsed / max(steps, 1), models)


@contextlib.contextmanager
def _current(streams):
    """Makes every stream in `streams` current on its device (peer copies order against both sides)."""
    with contextlib.ExitStack() as stack:
        for s in streams:
            stack.enter_context(torch.openreg.stream(s))
        yield


def _optimizer(name: str, params, lr: float):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr * 0.1)
    raise ValueError(f"unknown optimizer {name!r}")


def _sync_all(devices) -> None:
    """Synchronizes every device the workload used. Synchronizing only the current one left the other
    device's side streams running while their tensors (allocated on its default stream, used on a side
    stream without record_stream) were freed and reused: a race the stream sanitizer reports."""
    for d in devices:
        torch.openreg.synchronize(d)


def _sync(device: str) -> None:
    if torch.device(device).type == "openreg":
        torch.openreg.synchronize()
