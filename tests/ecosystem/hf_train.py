"""Hugging Face Trainer and accelerate on openreg: the recipe of docs/distributed.md ("Hugging Face Trainer and
accelerate"), run by test_transformers.py in one process and under torchrun:

    ACCELERATE_TORCH_DEVICE=openreg python hf_train.py OUT_DIR single
    ACCELERATE_TORCH_DEVICE=openreg torchrun --nproc-per-node=2 hf_train.py OUT_DIR ddp

The recipe is ``setup_distributed`` and the ``use_cpu=`` / ``cpu=`` arguments below; everything else is
an ordinary training script. Each run writes ``OUT_DIR/<mode>_rank<R>.json`` (per scenario: the logged
losses, where the parameters are, what wrapped the model, the dtype autocast gave a matmul, a checksum
of the tokens each step saw) and ``OUT_DIR/<mode>_<scenario>_rank<R>.pt`` (the trained parameters).

A tiny GPT-2 built from a config (no download), synthetic token ids, dropout off, so runs on different
devices and process counts see the same numbers; the data is read in order, so one process with the
whole batch and two processes with half of it each see the same global batch at every step.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

STEPS = 4
GLOBAL_BATCH = 8
SEQ = 16
VOCAB = 64


def setup_distributed() -> bool:
    """The recipe's lines under torchrun: each rank uses the openreg device of its local rank, and the
    process group is made before accelerate makes one. accelerate has no distributed path for a device
    it does not know but its CPU one (``DistributedType.MULTI_CPU``: DDP over the existing group, the
    device from ``ACCELERATE_TORCH_DEVICE``); on that path it would make the group with "gloo", which
    carries CPU tensors only. ``init_process_group()`` with no backend uses openreg's for openreg
    tensors. Returns whether this process is one of several (then ``use_cpu=True`` selects that path)."""
    if "LOCAL_RANK" not in os.environ:
        return False
    torch.openreg.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group()
    return True


def tiny_gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=SEQ,
        n_embd=32,
        n_layer=2,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def dataset() -> list[dict[str, torch.Tensor]]:
    ids = torch.randint(0, VOCAB, (STEPS * GLOBAL_BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    return [{"input_ids": row, "labels": row} for row in ids]


class Probe:
    """What the model saw: the dtype of the first MLP's matmul output (bfloat16 under bf16 autocast)
    and, per forward, a checksum of the input ids (the ranks of a DDP run see different halves)."""

    def __init__(self, model: GPT2LMHeadModel) -> None:
        self.matmul_dtypes: set[str] = set()
        self.batches: list[int] = []
        model.transformer.h[0].mlp.c_fc.register_forward_hook(
            lambda mod, inp, out: self.matmul_dtypes.add(str(out.dtype))
        )
        model.register_forward_pre_hook(self._record_batch, with_kwargs=True)

    def _record_batch(self, mod, args, kwargs):
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        self.batches.append(int((ids.cpu().long() * torch.arange(1, ids.numel() + 1).view_as(ids)).sum()))


def world() -> tuple[int, int]:
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def report(model: torch.nn.Module, wrapped: torch.nn.Module, probe: Probe, losses: list[float]) -> dict:
    return {
        "losses": losses,
        "param_devices": sorted({str(p.device) for p in model.parameters()}),
        "param_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
        "wrapped": type(wrapped).__name__,
        "world_size": world()[1],
        # The default group: openreg's (ProcessGroupOpenReg) carries the DDP all-reduces of openreg tensors.
        "group": type(dist.group.WORLD).__name__ if dist.is_initialized() else None,
        "matmul_dtypes": sorted(probe.matmul_dtypes),
        "batches": probe.batches,
    }


def train_trainer(distributed: bool, out_dir: str, *, bf16: bool = False) -> tuple[dict, dict]:
    """Trainer, with the device from ACCELERATE_TORCH_DEVICE (and the precision from
    ACCELERATE_MIXED_PRECISION when set). ``bf16=True`` is accepted by TrainingArguments only with
    ``use_cpu=True``, so under torchrun here (see docs/distributed.md)."""
    model = tiny_gpt2()
    probe = Probe(model)
    args = TrainingArguments(
        output_dir=out_dir,
        per_device_train_batch_size=GLOBAL_BATCH // world()[1],
        max_steps=STEPS,
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        train_sampling_strategy="sequential",
        use_cpu=distributed,  # the recipe: accelerate's device-agnostic DDP path under torchrun
        bf16=bf16,
    )
    trainer = Trainer(model=model, args=args, train_dataset=dataset())
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    result = report(model, trainer.model_wrapped, probe, losses)
    result["args_device"] = str(args.device)
    result["distributed_type"] = str(trainer.accelerator.distributed_type)
    result["mixed_precision"] = trainer.accelerator.mixed_precision
    return result, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def train_accelerate(distributed: bool) -> tuple[dict, dict]:
    """A plain accelerate loop with bf16 autocast."""
    accelerator = Accelerator(cpu=distributed, mixed_precision="bf16")  # the recipe: cpu= as use_cpu= above
    model = tiny_gpt2()
    probe = Probe(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(dataset(), batch_size=GLOBAL_BATCH // accelerator.num_processes)
    wrapped, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for batch in loader:
        loss = wrapped(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.gather(loss.detach()).mean().item())
    result = report(model, wrapped, probe, losses)
    result["device"] = str(accelerator.device)
    result["distributed_type"] = str(accelerator.distributed_type)
    return result, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def with_env(name: str, value: str | None):
    """Runs a scenario with one environment variable set (None: unset), as a user's shell would."""

    class _Env:
        def __enter__(self):
            self.old = os.environ.get(name)
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

        def __exit__(self, *exc):
            if self.old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = self.old

    return _Env()


def main() -> None:
    out_dir, mode = sys.argv[1], sys.argv[2]
    distributed = setup_distributed()
    assert distributed == (mode == "ddp"), "ddp runs under torchrun, single without"
    runs: dict[str, tuple[dict, dict]] = {}
    # The accelerate loop comes first: a Trainer resets accelerate's state when it is made, an
    # Accelerator made after one would meet the last Trainer's state.
    runs["accelerate_bf16"] = train_accelerate(distributed)
    runs["trainer"] = train_trainer(distributed, out_dir)
    if distributed:
        runs["trainer_bf16"] = train_trainer(distributed, out_dir, bf16=True)
    else:
        with with_env("ACCELERATE_MIXED_PRECISION", "bf16"):
            runs["trainer_bf16"] = train_trainer(distributed, out_dir)
        # The same runs on the CPU, for the comparison (the variable set to cpu, as without openreg).
        with with_env("ACCELERATE_TORCH_DEVICE", "cpu"):
            runs["cpu_trainer"] = train_trainer(distributed, out_dir)
            with with_env("ACCELERATE_MIXED_PRECISION", "bf16"):
                runs["cpu_trainer_bf16"] = train_trainer(distributed, out_dir)
    AcceleratorState._reset_state(reset_partial_state=True)
    rank = world()[0]
    for name, (_, params) in runs.items():
        torch.save(params, os.path.join(out_dir, f"{mode}_{name}_rank{rank}.pt"))
    with open(os.path.join(out_dir, f"{mode}_rank{rank}.json"), "w") as f:
        json.dump({name: result for name, (result, _) in runs.items()}, f, indent=1)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
