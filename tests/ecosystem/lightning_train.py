"""A small Lightning training shared by test_lightning.py, and its 2-process DDP run as a script.

``python lightning_train.py OUT_DIR`` trains with ``Trainer(accelerator="openreg", devices=2,
strategy="ddp")``: Lightning's "ddp" launches the second process itself by running this script again. Each
rank saves what it saw to ``OUT_DIR/ddp_rank<R>.pt``. Then, in the same processes, a second fit with
``OpenRegDDPStrategy(ddp_comm_hook=...)`` checks that a DDP communication hook is installed on openreg.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch_openreg.lightning  # noqa: F401  (registers accelerator="openreg" and the strategies)
from torch.utils.data import DataLoader, TensorDataset

import lightning.pytorch as pl  # isort: skip  (after the registration, as a user's script would)

STEPS = 3
GLOBAL_BATCH = 32
FEATURES = 8
LR = 0.1
MOMENTUM = 0.9


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS * GLOBAL_BATCH, FEATURES, generator=g)
    y = torch.randn(STEPS * GLOBAL_BATCH, 1, generator=g)
    return x, y


def make_net() -> torch.nn.Module:
    """An MLP with fixed weights (from its own generator, so no global seed matters)."""
    net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return net


def make_optimizer(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


class Regressor(pl.LightningModule):
    """Records, at every step, what the step ran on: device, world size, backend, output dtype, loss."""

    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()
        self.steps: list[dict[str, Any]] = []

    def training_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor:
        x, y, index = batch
        out = self.net(x)
        loss = torch.nn.functional.mse_loss(out.float(), y.float())
        distributed = dist.is_available() and dist.is_initialized()
        self.steps.append(
            {
                "loss": loss.item(),
                "samples": index.tolist(),
                "param_device": str(self.net[0].weight.device),
                "batch_device": str(x.device),
                "out_dtype": out.dtype,
                "world_size": dist.get_world_size() if distributed else 1,
                "backend": dist.get_backend() if distributed else None,
                "wrapper": type(self.trainer.strategy.model).__name__,
            }
        )
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return make_optimizer(self.parameters())


def fit(batch_size: int, **trainer_kwargs: Any) -> tuple[Regressor, pl.Trainer]:
    """STEPS steps over the data in order; under DDP, Lightning shuffles and shards it (DistributedSampler).

    Each sample comes with its index, so a step records which samples it trained on.
    """
    x, y = make_data()
    loader = DataLoader(TensorDataset(x, y, torch.arange(len(x))), batch_size=batch_size)
    module = Regressor()
    trainer = pl.Trainer(
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **trainer_kwargs,
    )
    trainer.fit(module, loader)
    return module, trainer


def reference_training(batches: list[list[int]] | None = None) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The same training without Lightning, one process on the CPU: step k trains on the samples
    ``batches[k]`` (by default the data in order, GLOBAL_BATCH samples a step)."""
    x, y = make_data()
    if batches is None:
        batches = [list(range(k * GLOBAL_BATCH, (k + 1) * GLOBAL_BATCH)) for k in range(STEPS)]
    net = make_net()
    optimizer = make_optimizer(net.parameters())
    losses = []
    for rows in batches:
        loss = torch.nn.functional.mse_loss(net(x[rows]), y[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {k: v.detach().clone() for k, v in net.state_dict().items()}, losses


def _counting_allreduce(state, bucket):  # type: ignore[no-untyped-def]
    # Unannotated: DDP refuses a hook whose `bucket` annotation is not dist.GradBucket itself, and under
    # `from __future__ import annotations` every annotation is a string.
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    state["calls"] += 1
    return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]  (None: the default group)


def main(out_dir: Path) -> None:
    # Each rank trains on its half of the batch of a step, and DDP averages the two halves' gradients: the
    # test compares with one process training on both halves at once.
    module, trainer = fit(GLOBAL_BATCH // 2, accelerator="openreg", devices=2, strategy="ddp")
    result: dict[str, Any] = {
        "rank": trainer.global_rank,
        "strategy": type(trainer.strategy).__name__,
        "state": {k: v.detach().cpu().clone() for k, v in module.net.state_dict().items()},
        "steps": module.steps,
    }

    from torch_openreg.lightning import OpenRegDDPStrategy

    hook_state = {"calls": 0}
    strategy = OpenRegDDPStrategy(ddp_comm_state=hook_state, ddp_comm_hook=_counting_allreduce)
    hooked, _ = fit(GLOBAL_BATCH // 2, accelerator="openreg", devices=2, strategy=strategy)
    result["hook_calls"] = hook_state["calls"]
    result["hooked_state"] = {k: v.detach().cpu().clone() for k, v in hooked.net.state_dict().items()}
    torch.save(result, out_dir / f"ddp_rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
