"""What one training step of a mid-size model would take on 8 H100s, sized on this machine (`make demo`'s
last part; issue 27).

A GPT of about 1.3 B parameters (24 layers, d=2048, 16 heads, 1024 tokens, bf16, AdamW) is trained
with FSDP2 by 8 ranks, spawned here as processes in timing-only execution with the H100 profile
(``OPENREG_EXECUTE=timing``, ``OPENREG_DEVICE_PROFILE=h100-sxm``): kernels and collectives are timed
on the modelled GPUs and not run, and device memory is never backed, so the job needs no GPU and
almost no memory. The same step on 1 rank gives the scaling. Prints the step time, MFU, peak memory
per GPU and each rank's breakdown (compute, exposed communication, copies, and the device's idle time:
waiting for the host), and writes rank 0's timeline (Chrome trace JSON and PNG).

    python -m bench.demos.demo_sizing [--ranks 8] [--batch 8] [--out bench/results]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

LAYERS, D, HEADS, VOCAB, CTX = 24, 2048, 16, 50304, 1024


def _gpt():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(CTX, D)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    return GPT


def _rank(rank: int, batch: int, trace_path: str | None) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dev = torch.device("openreg", rank % torch.openreg.device_count())  # type: ignore[attr-defined]
    torch.openreg.set_device(dev)  # type: ignore[attr-defined]
    with torch.device("meta"):  # no host memory for the values
        model = _gpt()()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.to_empty(device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    idx = torch.zeros(batch, CTX, dtype=torch.long, device=dev)

    def step():
        logits = model(idx)
        F.cross_entropy(logits.view(-1, VOCAB).float(), idx.view(-1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # the optimizer's states are made here
    torch.openreg.synchronize()  # type: ignore[attr-defined]
    torch.openreg.reset_peak_memory_stats(dev)  # type: ignore[attr-defined]
    with torch.openreg.timing.region(dev) as r:  # type: ignore[attr-defined]
        step()
    if trace_path is not None:  # every rank takes the step (its collectives); rank 0 traces it
        with torch.openreg.trace(trace_path) if rank == 0 else contextlib.nullcontext():  # type: ignore[attr-defined]
            step()
            torch.openreg.synchronize()  # type: ignore[attr-defined]
    d = r.devices[0]
    flops_per_token = 6 * sum(p.numel() for p in model.parameters())
    return {"wall": r.wall, "compute": d.compute, "comm": d.comm, "exposed": d.exposed_comm, "copy": d.copy,
            "idle": d.idle, "mfu": r.mfu, "peak": torch.openreg.max_memory_allocated(dev),  # type: ignore[attr-defined]
            "params": sum(p.numel() for p in model.parameters()), "tokens": batch * CTX,
            "flops_per_token": flops_per_token}


def _run(ranks: int, batch: int, trace_path: str | None) -> list[dict]:
    from tests.support import spawn

    saved = dict(os.environ)
    os.environ.update({"OPENREG_DEVICE_PROFILE": "h100-sxm", "OPENREG_EXECUTE": "timing"})
    try:
        return spawn.run(_rank, batch, trace_path, world=ranks, timeout_s=900, pg_timeout_s=600)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8, help="sequences of 1024 tokens per rank")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "results"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    trace_path = os.path.join(args.out, f"sizing_{args.ranks}xh100_timeline.json")
    many = _run(args.ranks, args.batch, trace_path)
    one = _run(1, args.batch, None)[0]
    r0 = many[0]
    print(f"GPT, {r0['params'] / 1e9:.2f} B parameters, FSDP2 over {args.ranks} modelled H100s, "
          f"{args.batch} x {CTX} tokens per GPU, bf16 with fp32 reductions, AdamW")
    step = max(r["wall"] for r in many)
    tokens = sum(r["tokens"] for r in many)
    print(f"step time {step * 1e3:.1f} ms, {tokens / step:,.0f} tokens/s, MFU {r0['mfu'] * 100:.1f}%, "
          f"peak memory per GPU {r0['peak'] / 2**30:.1f} GiB of 80")
    print(f"1 GPU, same batch: step {one['wall'] * 1e3:.1f} ms; per GPU, {args.ranks} GPUs process "
          f"{one['wall'] / step * 100:.0f}% of 1 GPU's tokens/s (communication costs, the optimizer step is sharded)")
    print(f"{'rank':>4} {'step ms':>9} {'compute':>9} {'exposed comm':>13} {'comm':>9} {'copies':>9} {'idle':>9}")
    for i, r in enumerate(many):
        print(f"{i:>4} {r['wall'] * 1e3:>9.1f} {r['compute'] * 1e3:>9.1f} {r['exposed'] * 1e3:>13.1f} "
              f"{r['comm'] * 1e3:>9.1f} {r['copy'] * 1e3:>9.1f} {r['idle'] * 1e3:>9.1f}")
    print("(ms of the modelled GPUs; idle: the device waited for its host)")
    from bench.common.timeline_png import render

    png = render(trace_path, trace_path.replace(".json", ".png"),
                 title=f"one FSDP2 step of a {r0['params'] / 1e9:.1f} B GPT, rank 0 of {args.ranks} modelled H100s")
    print(f"rank 0's timeline: {trace_path} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
