"""The ``train.py`` of the README's two-host command, as tests/python/test_multihost.py runs it.

``torchrun ... multihost_train.py OUT``: DDP on openreg, each rank training on its share of one global
batch; rank r writes ``OUT/rank<r>.pt`` (its hostname and final parameters) and, first thing,
``OUT/pid<r>`` (so the test can end a rank that hangs). ``train_single`` trains the same model on the
whole batch in one process: with the mean loss, DDP's averaged gradients are the whole batch's.
"""

from __future__ import annotations

import os
import socket
import sys

import torch
from torch import nn

STEPS = 4
BATCH = 16


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def make_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, 8, generator=g), torch.randn(BATCH, 1, generator=g)


def _train(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(STEPS):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def train_single(device: torch.device) -> dict[str, torch.Tensor]:
    """The whole batch in one process, no process group."""
    model = make_model().to(device)
    x, y = make_batch()
    _train(model, x.to(device), y.to(device))
    return {k: v.cpu() for k, v in model.state_dict().items()}


def main(out: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ["RANK"])
    with open(os.path.join(out, f"pid{rank}"), "w") as f:
        f.write(str(os.getpid()))
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.openreg.set_device(local_rank)  # type: ignore[attr-defined]
    device = torch.device("openreg", local_rank)
    dist.init_process_group()  # the README's form: openreg's backend for openreg tensors
    world = dist.get_world_size()
    model = DDP(make_model().to(device))
    x, y = make_batch()
    share = BATCH // world
    mine = slice(rank * share, (rank + 1) * share)
    _train(model, x[mine].to(device), y[mine].to(device))
    params = {k: v.cpu() for k, v in model.module.state_dict().items()}
    torch.save({"hostname": socket.gethostname(), "world": world, "params": params},
               os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
