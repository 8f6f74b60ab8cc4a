"""Calibration on whole workloads (issue 39, first part): published training and inference jobs, each
rebuilt as a plain PyTorch program and run on openreg in timing-only execution, compared with the
published throughput, MFU and peak memory. The programs and their rows live here;
bench/sweeps/calibration_bench.py runs them and prints the table, tests/python/test_calibration.py runs
them scaled down. No profile is fitted to these rows: the table says where the timing model stands, so
that a later change to a profile (a physical property with a source) can be judged against it.

Each runnable row is spawned as its ranks (tests/support/spawn.py) with ``OPENREG_EXECUTE=timing`` and
the row's profile; every rank builds its model on ``meta`` and moves it with ``to_empty``, takes one
warm-up step (the optimizer's states are made there), then the timed steps inside
``torch.openreg.timing.region()``. Rows of more than 8 ranks run in symmetric-rank mode, one process per
role (``_symmetric``; python -m torch_openreg.symmetric). Rows that no faithful plain PyTorch program
reproduces here (Float8, vLLM, collectives inside a captured graph, a Megatron pipeline) are listed with
their published figures and the reason, and not run.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

GIB = 2**30
NOT_RUN_MEGATRON_PP = ("not run: the Megatron program has no pipeline split yet (symmetric-rank mode would run "
                       "its 8 stages as 8 processes)")


# ---------------------------------------------------------------------------------------------------
# Configurations


@dataclass(frozen=True)
class LlamaTrain:
    """torchtitan's Llama 3 training (torchtitan/models/llama/model.py and parallelisms/parallelize_llama.py
    at the end of 2024): fp32 parameters sharded by FSDP2 with bf16 compute and fp32 gradient reduction,
    AdamW (betas 0.9/0.95, weight decay 0.1, fused: torchtitan's default optimizer.implementation),
    gradient clipping at 1.0, per-op selective activation checkpointing ('op': save matmuls except every
    second one, attention and reduce-scatters)."""

    dim: int = 4096
    layers: int = 32
    heads: int = 32
    kv_heads: int = 8
    ffn_hidden: int = 14336  # 4*dim*2/3 * 1.3, rounded up to a multiple of 1024 (torchtitan's 8B args)
    vocab: int = 128256
    seq: int = 8192
    batch: int = 2  # local batch, sequences per GPU
    ranks: int = 8
    ac: str = "op"  # "op" (per-op selective), "layer" (every second block), "full" or "none"
    tp: int = 1  # tensor-parallel degree (torchtitan's plan with sequence parallelism); FSDP over ranks / tp
    hsdp_shard: int = 0  # HSDP: parameters sharded over groups of this many ranks, replicated across them
    pp: int = 1  # pipeline stages (torchtitan's split: equal runs of blocks, the embedding first, the output last)
    microbatches: int = 0  # per step under pipelining (0: one per sequence of the local batch)


@dataclass(frozen=True)
class MegatronTrain:
    """Megatron-LM's GPT as Korthikanti et al. 2022 trained it (arXiv 2205.05198, Tables 3 and 5): tensor
    parallel over all ranks (no data or pipeline parallelism), fp16 with fp32 main parameters and
    gradients, Adam, dropout 0.1, learned position embeddings, output layer tied to the word embedding,
    vocabulary-parallel cross-entropy. ``recompute``: "full" (each layer checkpointed, tensor parallel
    all-reduces) or "selective" (only the core attention recomputed, with sequence parallelism)."""

    hidden: int = 6144
    layers: int = 48
    heads: int = 64
    vocab: int = 51200  # GPT-2's 50257 padded to a multiple of 128 x TP, as Megatron pads
    seq: int = 2048
    batch: int = 4  # global batch = micro batch (calculon-ai/calculon validation/seqsel/tab5)
    ranks: int = 8
    recompute: str = "full"


@dataclass(frozen=True)
class GptFastDecode:
    """gpt-fast's batch-1 generation (pytorch-labs/gpt-fast model.py and generate.py): bf16 weights, a
    static KV cache of the prompt plus the new tokens rounded up to 8, a 5-token prompt, 200 new tokens,
    top-k 200 sampling at temperature 0.8, each decode step replayed as one graph (gpt-fast compiles it
    with mode="reduce-overhead": CUDA graphs)."""

    dim: int = 4096
    layers: int = 32
    heads: int = 32
    kv_heads: int = 32  # n_local_heads: fewer than heads is grouped-query attention (Llama 3)
    ffn_hidden: int = 11008  # gpt-fast's find_multiple(int(2 * 4 * 4096 / 3), 256)
    vocab: int = 32000
    rope_base: float = 10000.0  # sets the rotation table's values only, not its cost
    prompt: int = 5
    new_tokens: int = 200
    block_size: int = 2048


@dataclass(frozen=True)
class MptTrain:
    """MosaicML llm-foundry's MPT pretraining benchmarks (scripts/train/benchmarking/README.md, run with
    Composer): GPT with learned positions and biases in every linear and LayerNorm (its NumParams column
    counts them), low-precision LayerNorm, GELU MLP of 4x, output tied to the word embedding, no
    dropout; FSDP FULL_SHARD per block with Composer's DEFAULT mixed precision for amp_bf16 (fp32
    parameters gathered in bf16, bf16 autocast, fp32 gradient reduction); DecoupledAdamW (betas 0.9/0.95, no
    weight decay) and gradient clipping at 1.0; micro batches accumulated without skipping the
    gradient reduction; activation checkpointing of whole blocks where the row says so."""

    d_model: int = 4096
    layers: int = 32
    heads: int = 32
    vocab: int = 50368
    seq: int = 2048
    micro_batch: int = 6
    grad_accum: int = 2
    ranks: int = 8
    checkpoint: bool = False


@dataclass
class Row:
    name: str
    profile: str
    gpus: int
    config: Any  # one of the dataclasses above, or None for rows not run
    published: dict[str, float]  # tok_s_gpu, and where the source gives them: step_s, mem_gib, mfu, bw_gbs
    mem_stat: str  # "reserved" or "allocated": what the source's memory figure is
    source: str
    setup: str  # the full configuration, in words
    not_run: str | None = None
    notes: list[str] = field(default_factory=list)
    expect_oom: bool = False  # the source reports this configuration running out of memory
    # False: the source ran what openreg cannot (torch.compile, Float8): the row sizes the job here and is
    # shown beside the published figure, outside the error statistics
    compared: bool = True


# ---------------------------------------------------------------------------------------------------
# Models (written from the sources' descriptions; each says where it differs)


def _rms_norm(dim: int):
    """Llama's RMSNorm (eps 1e-5, computed in fp32), as both Llama programs below use it."""
    import torch
    import torch.nn as nn

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            y = x.float()
            return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight

    return RMSNorm()


def _llama(cfg: LlamaTrain):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    head_dim = cfg.dim // cfg.heads

    def RMSNorm():  # noqa: N802 - read as the class the sources name
        return _rms_norm(cfg.dim)

    def rotary(x, freqs_cis):
        # torchtitan rotates q and k as complex numbers in fp32
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs_cis[: x.shape[1]].view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wq = nn.Linear(cfg.dim, cfg.heads * head_dim, bias=False)
            self.wk = nn.Linear(cfg.dim, cfg.kv_heads * head_dim, bias=False)
            self.wv = nn.Linear(cfg.dim, cfg.kv_heads * head_dim, bias=False)
            self.wo = nn.Linear(cfg.heads * head_dim, cfg.dim, bias=False)

        def forward(self, x, freqs_cis):
            b, s, _ = x.shape
            q = self.wq(x).view(b, s, -1, head_dim)
            k = self.wk(x).view(b, s, -1, head_dim)
            v = self.wv(x).view(b, s, -1, head_dim)
            q, k = rotary(q, freqs_cis), rotary(k, freqs_cis)
            rep = cfg.heads // cfg.kv_heads  # grouped-query attention: each kv head serves `rep` q heads
            kv = k.shape[2]  # this rank's kv heads (all of them, or its share under tensor parallelism)
            k = k[:, :, :, None, :].expand(b, s, kv, rep, head_dim).reshape(b, s, -1, head_dim)
            v = v[:, :, :, None, :].expand(b, s, kv, rep, head_dim).reshape(b, s, -1, head_dim)
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            return self.wo(y.transpose(1, 2).contiguous().view(b, s, -1))

    class FeedForward(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)
            self.w2 = nn.Linear(cfg.ffn_hidden, cfg.dim, bias=False)
            self.w3 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention_norm, self.attention = RMSNorm(), Attention()
            self.ffn_norm, self.feed_forward = RMSNorm(), FeedForward()

        def forward(self, x, freqs_cis):
            h = x + self.attention(self.attention_norm(x), freqs_cis)
            return h + self.feed_forward(self.ffn_norm(h))

    class Transformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok_embeddings = nn.Embedding(cfg.vocab, cfg.dim)
            # torchtitan keeps 2x the training length of rotations, complex64, as a buffer
            self.register_buffer("freqs_cis", torch.empty(2 * cfg.seq, head_dim // 2, dtype=torch.complex64))
            self.layers = nn.ModuleDict({str(i): Block() for i in range(cfg.layers)})
            self.norm = RMSNorm()
            self.output = nn.Linear(cfg.dim, cfg.vocab, bias=False)

        def forward(self, tokens):
            # a pipeline stage holds some of these (torchtitan's split sets the others to None)
            h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
            for layer in self.layers.values():
                h = layer(h, self.freqs_cis)  # rotary takes the rows of its (gathered) sequence
            return self.output(self.norm(h)).float() if self.output is not None else h

    return Transformer


def _op_sac_context():
    """torchtitan's per-op selective checkpointing policy ('op'): keep the outputs of matmuls (all but
    every second one), attention and reduce-scatters; recompute everything else."""
    from collections import defaultdict

    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = {
        torch.ops.aten.mm.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
    }
    meta: dict[str, int] = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = "recompute_mm" if ctx.is_recompute else "forward_mm"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        keep = func in save and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _megatron(cfg: MegatronTrain, tp: int, tp_rank: int):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    head_dim = cfg.hidden // cfg.heads
    sequence_parallel = cfg.recompute == "selective"

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query_key_value = nn.Linear(cfg.hidden, 3 * cfg.hidden)
            self.dense = nn.Linear(cfg.hidden, cfg.hidden)

        def core(self, q, k, v):
            # Megatron's core attention (2022, before flash attention): baddbmm with the 1/sqrt(d) scale,
            # a causal masked softmax, dropout, and a bmm with v. (Megatron's softmax is one fused kernel
            # each way; PyTorch's one-kernel _masked_softmax has no meta function, so openreg would
            # synchronize on it: here a masked_fill_ and a softmax.)
            # Activations are [s, b, ...], Megatron's layout: q, k and v are strided views as batches of
            # heads, no copies; the context is made contiguous once, as Megatron does.
            s, b, n, d = q.shape
            q, k, v = (t.reshape(s, b * n, d).transpose(0, 1) for t in (q, k, v))
            scores = torch.baddbmm(torch.empty(b * n, s, s, dtype=q.dtype, device=q.device), q, k.transpose(1, 2),
                                   beta=0.0, alpha=1.0 / math.sqrt(d))
            mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu_(1)
            probs = F.dropout(torch.softmax(scores.masked_fill_(mask, float("-inf")), dim=-1), 0.1)
            return torch.bmm(probs, v).view(b, n, s, d).permute(2, 0, 1, 3).reshape(s, b, n * d)

        def forward(self, x):
            s, b, _ = x.shape
            # Megatron's fused QKV is laid out [heads, 3, head_dim], so a column shard holds whole heads
            q, k, v = self.query_key_value(x).view(s, b, -1, 3, head_dim).unbind(3)
            ctx = checkpoint(self.core, q, k, v, use_reentrant=False) if sequence_parallel else self.core(q, k, v)
            return self.dense(ctx)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dense_h_to_4h = nn.Linear(cfg.hidden, 4 * cfg.hidden)
            self.dense_4h_to_h = nn.Linear(4 * cfg.hidden, cfg.hidden)

        def forward(self, x):
            return self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(x)))

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_layernorm, self.attention = nn.LayerNorm(cfg.hidden), SelfAttention()
            self.post_attention_layernorm, self.mlp = nn.LayerNorm(cfg.hidden), MLP()

        def forward(self, x):
            x = x + F.dropout(self.attention(self.input_layernorm(x)), 0.1)
            return x + F.dropout(self.mlp(self.post_attention_layernorm(x)), 0.1)

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word_embeddings = nn.Embedding(cfg.vocab, cfg.hidden)
            self.position_embeddings = nn.Embedding(cfg.seq, cfg.hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(cfg.layers))
            self.final_layernorm = nn.LayerNorm(cfg.hidden)
            self.output = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

        def forward(self, tokens):
            # [s, b, h] activations (Megatron's layout: sequence parallelism shards the first dimension,
            # so its all-gathers and reduce-scatters need no rearranging copies); sequence parallel: this
            # rank's slice of the sequence
            h = self.word_embeddings(tokens.t())
            start = tp_rank * h.shape[0] if sequence_parallel else 0
            h = F.dropout(h + self.position_embeddings.weight[start : start + h.shape[0]].unsqueeze(1), 0.1)
            for layer in self.layers:
                h = layer(h)
            return self.output(self.final_layernorm(h))

    return GPT


def _gpt_fast(cfg: GptFastDecode):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    head_dim = cfg.dim // cfg.heads
    cache_len = -(-(cfg.prompt + cfg.new_tokens) // 8) * 8  # gpt-fast rounds the cache up to 8

    def RMSNorm():  # noqa: N802 - read as the class the sources name
        return _rms_norm(cfg.dim)

    def rotary(x, freqs):
        # gpt-fast's real-valued rotation: pairs in fp32 against a (cos, sin) table
        xs = x.float().reshape(*x.shape[:-1], -1, 2)
        f = freqs.view(1, xs.size(1), 1, xs.size(3), 2)
        out = torch.stack([xs[..., 0] * f[..., 0] - xs[..., 1] * f[..., 1],
                           xs[..., 1] * f[..., 0] + xs[..., 0] * f[..., 1]], -1)
        return out.flatten(3).type_as(x)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wqkv = nn.Linear(cfg.dim, (cfg.heads + 2 * cfg.kv_heads) * head_dim, bias=False)
            self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
            self.register_buffer("k_cache", torch.zeros(1, cfg.kv_heads, cache_len, head_dim))
            self.register_buffer("v_cache", torch.zeros(1, cfg.kv_heads, cache_len, head_dim))

        def forward(self, x, freqs, mask, pos):
            b, s, _ = x.shape
            kv = cfg.kv_heads * head_dim
            q, k, v = self.wqkv(x).split([cfg.dim, kv, kv], dim=-1)
            q = rotary(q.view(b, s, cfg.heads, head_dim), freqs)
            k = rotary(k.view(b, s, cfg.kv_heads, head_dim), freqs)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.view(b, s, cfg.kv_heads, head_dim).transpose(1, 2)
            self.k_cache[:, :, pos] = k
            self.v_cache[:, :, pos] = v
            k, v = self.k_cache, self.v_cache
            if cfg.kv_heads < cfg.heads:
                # gpt-fast repeats each kv head for its query heads after the cache update (one copy
                # each, which its compiled step makes too: SDPA's kernel reads whole tensors); with as
                # many kv heads as query heads the repeat is the identity, which Inductor removes
                k = k.repeat_interleave(cfg.heads // cfg.kv_heads, dim=1)
                v = v.repeat_interleave(cfg.heads // cfg.kv_heads, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
            return self.wo(y.transpose(1, 2).contiguous().view(b, s, cfg.dim))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention_norm, self.attention, self.ffn_norm = RMSNorm(), Attention(), RMSNorm()
            self.w1 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)
            self.w3 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)
            self.w2 = nn.Linear(cfg.ffn_hidden, cfg.dim, bias=False)

        def forward(self, x, freqs, mask, pos):
            h = x + self.attention(self.attention_norm(x), freqs, mask, pos)
            y = self.ffn_norm(h)
            return h + self.w2(F.silu(self.w1(y)) * self.w3(y))

    class Transformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok_embeddings = nn.Embedding(cfg.vocab, cfg.dim)
            self.layers = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.norm = RMSNorm()
            self.output = nn.Linear(cfg.dim, cfg.vocab, bias=False)
            self.register_buffer("freqs_cis", torch.zeros(cfg.block_size, head_dim // 2, 2))
            self.register_buffer("causal_mask", torch.ones(cache_len, cache_len, dtype=torch.bool).tril())

        def forward(self, idx, pos):
            mask = self.causal_mask[None, None, pos]
            freqs = self.freqs_cis[pos]
            x = self.tok_embeddings(idx)
            for layer in self.layers:
                x = layer(x, freqs, mask, pos)
            return self.output(self.norm(x))

    return Transformer


def _mpt(cfg: MptTrain):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    head_dim = cfg.d_model // cfg.heads

    class LPLayerNorm(nn.LayerNorm):
        # llm-foundry's low-precision LayerNorm: input, weight and bias cast to the autocast dtype and
        # normalized there, with autocast off
        def forward(self, x):
            dt = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
            with torch.autocast(x.device.type, enabled=False):
                return F.layer_norm(x.to(dt), self.normalized_shape, self.weight.to(dt), self.bias.to(dt), self.eps)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.Wqkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
            self.out_proj = nn.Linear(cfg.d_model, cfg.d_model)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = (t.view(b, s, cfg.heads, head_dim).transpose(1, 2) for t in self.Wqkv(x).chunk(3, dim=-1))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # a flash kernel, causal
            return self.out_proj(y.transpose(1, 2).reshape(b, s, cfg.d_model))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm_1, self.attn = LPLayerNorm(cfg.d_model), Attention()
            self.norm_2 = LPLayerNorm(cfg.d_model)
            self.up_proj = nn.Linear(cfg.d_model, 4 * cfg.d_model)
            self.down_proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

        def forward(self, x):
            x = x + self.attn(self.norm_1(x))
            return x + self.down_proj(F.gelu(self.up_proj(self.norm_2(x))))

    class MPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
            self.wpe = nn.Embedding(cfg.seq, cfg.d_model)  # learned positions up to max_seq_len
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.norm_f = LPLayerNorm(cfg.d_model)

        def forward(self, tokens):
            x = self.wte(tokens) + self.wpe.weight[: tokens.shape[1]].unsqueeze(0)
            for block in self.blocks:
                x = block(x)
            return F.linear(self.norm_f(x), self.wte.weight)  # tied output, bf16 under autocast

    return MPT


# ---------------------------------------------------------------------------------------------------
# Rank programs


def _setup(rank: int):
    import torch

    dev = torch.device("openreg", rank % torch.openreg.device_count())  # type: ignore[attr-defined]
    torch.openreg.set_device(dev)  # type: ignore[attr-defined]
    return dev


def _measure(dev, step: Callable[[], None], steps: int) -> dict[str, Any]:
    """One warm-up step, then ``steps`` timed ones; the peaks are those of the timed steps (the
    optimizer's states, made in the warm-up, stay resident through them)."""
    import torch

    t0 = time.monotonic()
    step()
    torch.openreg.synchronize()  # type: ignore[attr-defined]
    torch.openreg.reset_peak_memory_stats(dev)  # type: ignore[attr-defined]
    with torch.openreg.timing.region(dev) as r:  # type: ignore[attr-defined]
        for _ in range(steps):
            step()
    d = r.devices[0]
    return {"step_s": r.wall / steps, "compute_s": d.compute / steps, "comm_s": d.comm / steps,
            "exposed_comm_s": d.exposed_comm / steps, "copy_s": d.copy / steps, "idle_s": d.idle / steps,
            "kernels": d.kernels // steps, "hw_mfu": r.mfu,
            "breakdown_s": {k: v / steps for k, v in d.breakdown.as_dict().items()},
            "peak_allocated": torch.openreg.max_memory_allocated(dev),  # type: ignore[attr-defined]
            "peak_reserved": torch.openreg.max_memory_reserved(dev),  # type: ignore[attr-defined]
            "capacity": torch.openreg.timing.profile()["memory_bytes"],  # type: ignore[attr-defined]
            "peak_flops": torch.openreg.timing.profile()["bf16_tensor_flops"],  # type: ignore[attr-defined]
            "memory_bandwidth": torch.openreg.timing.profile()["memory_bandwidth"],  # type: ignore[attr-defined]
            "host_wall_s": time.monotonic() - t0,
            "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _llama_tensor_parallel(model, tp_mesh) -> None:
    """torchtitan's tensor-parallel plan for Llama (parallelize_llama.py's apply_tp, end of 2024): the
    embedding row-wise into sequence-sharded activations, norms sequence-parallel, attention's and the
    feed-forward's input gathered, their first projections column-wise and last row-wise back into
    sequence shards; the output projection column-wise, its logits left sharded over the vocabulary for
    the loss (loss parallelism)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    plan = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    }
    parallelize_module(model, tp_mesh, {k: v for k, v in plan.items() if getattr(model, k) is not None})
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        })


def _llama_rank(rank: int, cfg: LlamaTrain, steps: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dev = _setup(rank)
    dp = cfg.ranks // (cfg.tp * cfg.pp)
    world = init_device_mesh("openreg", (cfg.pp, dp, cfg.tp), mesh_dim_names=("pp", "dp", "tp"))
    mesh = world["dp"]
    if cfg.hsdp_shard:  # fully_shard on a 2-D mesh: replicate over its first dim, shard over its second
        mesh = init_device_mesh("openreg", (cfg.ranks // cfg.hsdp_shard, cfg.hsdp_shard),
                                mesh_dim_names=("replicate", "shard"))
    with torch.device("meta"):  # fp32, as torchtitan builds it; FSDP2 computes in bf16
        model = _llama(cfg)()
    params = sum(p.numel() for p in model.parameters())  # the whole model's, before a pipeline split
    stage = world.get_local_rank("pp")
    if cfg.pp > 1:  # this stage's blocks; the embedding on the first, the norm and output on the last
        per = -(-cfg.layers // cfg.pp)
        for name in list(model.layers.keys()):
            if not stage * per <= int(name) < (stage + 1) * per:
                del model.layers[name]
        if stage > 0:
            model.tok_embeddings = None
        if stage < cfg.pp - 1:
            model.norm, model.output = None, None
    loss_context = contextlib.nullcontext
    if cfg.tp > 1:
        from torch.distributed.tensor.parallel import loss_parallel

        _llama_tensor_parallel(model, world["tp"])
        loss_context = loss_parallel
    if cfg.ac != "none":
        for i, (name, block) in enumerate(list(model.layers.items())):
            if cfg.ac == "layer" and i % 2 == 0:
                continue  # torchtitan's selective layer AC (option "2"): every second block, from the second
            ctx = {"context_fn": _op_sac_context} if cfg.ac == "op" else {}
            model.layers[name] = checkpoint_wrapper(block, preserve_rng_state=False, **ctx)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    blocks = list(model.layers.values())
    for i, block in enumerate(blocks):
        # torchtitan: the last block stays unsharded after forward (FSDP would prefetch it at once); under
        # pipelining every block reshards (its microbatches come back for the backward)
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=cfg.pp > 1 or i < len(blocks) - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=cfg.pp > 1)
    model.to_empty(device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    batch = torch.zeros(cfg.batch, cfg.seq + 1, dtype=torch.long)  # the loader's batch, on the host

    def loss_fn(pred, labels):
        return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))

    schedule = None
    if cfg.pp > 1:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        schedule = Schedule1F1B(PipelineStage(model, stage, cfg.pp, dev, group=world.get_group("pp")),
                                n_microbatches=cfg.microbatches or cfg.batch, loss_fn=loss_fn)

    def step() -> None:
        opt.zero_grad()
        tokens, labels = batch[:, :-1].to(dev), batch[:, 1:].to(dev)
        with loss_context():  # torchtitan's loss parallelism under tensor parallelism: logits stay vocab-sharded
            if schedule is None:
                pred = model(tokens)
                loss = loss_fn(pred, labels)
                del pred
                loss.backward()
            elif stage == 0:
                schedule.step(tokens)
            elif stage == cfg.pp - 1:
                schedule.step(target=labels, losses=[])
            else:
                schedule.step()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()

    out = _measure(dev, step, steps)
    # torchtitan's MFU: 6 x the parameters outside the embedding plus the attention's 12 l h q t per token
    head_dim = cfg.dim // cfg.heads
    out["flops_per_token"] = 6 * (params - cfg.vocab * cfg.dim) + 12 * cfg.layers * cfg.heads * head_dim * cfg.seq
    out["params"] = params
    # a tensor-parallel group shares its batch, a pipeline's stages pass it on
    out["tokens_per_gpu_step"] = cfg.batch * cfg.seq // (cfg.tp * cfg.pp)
    return out


def _megatron_rank(rank: int, cfg: MegatronTrain, steps: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        loss_parallel,
        parallelize_module,
    )

    dev = _setup(rank)
    mesh = init_device_mesh("openreg", (cfg.ranks,), mesh_dim_names=("tp",))
    sp = cfg.recompute == "selective"
    with torch.device("meta"):
        model = _megatron(cfg, cfg.ranks, rank)().half()  # fp16 parameters, as Megatron keeps them
    seq_layout = Shard(0) if sp else Replicate()  # activations are [s, b, h]
    parallelize_module(model, mesh, {
        "word_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq_layout),
        "output": ColwiseParallel(input_layouts=seq_layout, output_layouts=Shard(-1), use_local_output=False),
        **({"final_layernorm": SequenceParallel(sequence_dim=0)} if sp else {}),
    })
    for i, layer in enumerate(model.layers):
        plan: dict[str, Any] = {
            "attention.query_key_value": ColwiseParallel(),
            "attention.dense": RowwiseParallel(output_layouts=seq_layout),
            "mlp.dense_h_to_4h": ColwiseParallel(),
            "mlp.dense_4h_to_h": RowwiseParallel(output_layouts=seq_layout),
        }
        if sp:  # sequence parallel: layer norms and dropouts on this rank's slice of the sequence
            gather = PrepareModuleInput(input_layouts=(Shard(0),), desired_input_layouts=(Replicate(),))
            plan.update({"input_layernorm": SequenceParallel(sequence_dim=0),
                         "post_attention_layernorm": SequenceParallel(sequence_dim=0),
                         "attention": gather, "mlp": gather})
        parallelize_module(layer, mesh, plan)
        if cfg.recompute == "full":  # Megatron's full recompute: each layer from its input
            model.layers[i] = checkpoint_wrapper(layer, preserve_rng_state=True)
    model.output.weight = model.word_embeddings.weight  # tied: both are the vocabulary-sharded [V, h] weight
    model.to_empty(device=dev)
    params = list(model.parameters())

    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    # Megatron's mixed precision (Float16OptimizerWithFloat16Params): each rank keeps fp32 main copies of
    # its own shards, gradients are accumulated into fp32 main grads as each is made (the fp16 one freed
    # at once), the loss is scaled, and Adam runs on the main copies, copied back to the fp16 parameters.
    main = [local(p).detach().float() for p in params]
    for p, m in zip(params, main):
        m.grad = torch.zeros_like(m)

        def accumulate(p, m=m):
            m.grad.add_(local(p.grad))
            p.grad = None

        p.register_post_accumulate_grad_hook(accumulate)
    grads = [m.grad for m in main]
    # Megatron's clipping counts a parameter that every rank holds whole (layer norms, position embedding,
    # biases of row-parallel layers) once: on tensor-parallel rank 0
    counted = [m.grad for p, m in zip(params, main) if rank == 0 or hasattr(p, "to_local")
               and any(pl.is_shard() for pl in p.placements)]
    # apex's FusedAdam (Adam with decoupled weight decay, one multi-tensor kernel), as Megatron runs it
    opt = torch.optim.AdamW(main, lr=1e-4, weight_decay=0.01, fused=True)
    scale = torch.tensor(2.0**16, device=dev)
    found_inf = torch.zeros(1, device=dev)
    tokens = torch.zeros(cfg.batch, cfg.seq, dtype=torch.long, device=dev)

    def step() -> None:
        logits = model(tokens)
        with loss_parallel():  # Megatron's vocab-parallel cross-entropy, in fp32
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens.t().flatten(0, 1))
            (loss * scale).backward()
        found_inf.zero_()
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, 1.0 / scale)
        dist.all_reduce(found_inf, op=dist.ReduceOp.MAX)  # over the model-parallel group, as Megatron
        # Megatron reads the flag (a host sync) and skips the step on an overflow; in timing-only
        # execution the flag's value is meaningless, and a steady-state step has no overflow
        found_inf.item()
        norm_sq = torch.stack(torch._foreach_norm(counted)).square().sum()
        dist.all_reduce(norm_sq)
        torch._foreach_mul_(grads, (1.0 / (norm_sq.sqrt() + 1e-6)).clamp(max=1.0))  # clip at 1.0
        opt.step()
        torch._foreach_copy_([local(p.data) for p in params], main)
        torch._foreach_zero_(grads)

    out = _measure(dev, step, steps)
    h, s, L, V, B = cfg.hidden, cfg.seq, cfg.layers, cfg.vocab, cfg.batch
    # Narayanan et al. 2021's model FLOPs per iteration (no recompute), as Korthikanti et al. count MFU
    flops = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))
    out["flops_per_token"] = flops / (B * s)
    out["params"] = sum(p.numel() for p in model.parameters())
    out["tokens_per_gpu_step"] = B * s / cfg.ranks
    return out


def _decode_rank(rank: int, cfg: GptFastDecode, steps: int) -> dict[str, Any]:
    import torch

    dev = _setup(rank)
    with torch.device("meta"):
        model = _gpt_fast(cfg)()
    model = model.to_empty(device=dev).to(torch.bfloat16)  # the bool mask stays bool
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def sample(logits):
        # gpt-fast's logits_to_probs and multinomial_sample_one_no_sync: top-k 200, temperature 0.8
        logits = logits[0, -1] / 0.8
        v, _ = torch.topk(logits, 200)
        probs = torch.softmax(torch.where(logits < v.select(-1, -1).unsqueeze(-1), -float("inf"), logits), dim=-1)
        return torch.argmax(probs / torch.empty_like(probs).exponential_(1), dim=-1, keepdim=True).to(torch.int)

    static_tok = torch.zeros(1, 1, dtype=torch.int, device=dev)
    static_pos = torch.zeros(1, dtype=torch.long, device=dev)
    prompt = torch.zeros(1, cfg.prompt, dtype=torch.int)

    @torch.no_grad()
    def decode_one():
        return sample(model(static_tok, static_pos))

    # gpt-fast's decode step under CUDA graphs: captured once (after a warm-up on a side stream, as
    # torch.cuda.graph wants), then replayed per token
    side = torch.openreg.Stream()  # type: ignore[attr-defined]
    side.wait_stream(torch.openreg.current_stream())  # type: ignore[attr-defined]
    with torch.openreg.stream(side):  # type: ignore[attr-defined]
        decode_one()
    torch.openreg.current_stream().wait_stream(side)  # type: ignore[attr-defined]
    graph = torch.openreg.OpenRegGraph()  # type: ignore[attr-defined]
    with torch.openreg.graph(graph):  # type: ignore[attr-defined]
        static_out = decode_one()

    @torch.no_grad()
    def generate() -> None:
        # prefill, eager (gpt-fast compiles it only with --compile_prefill); its token is the first new one
        idx = prompt.to(dev)
        pos = torch.arange(cfg.prompt, device=dev)
        first = sample(model(idx, pos))
        static_tok.copy_(first.view(1, 1))
        static_pos.fill_(cfg.prompt)
        new = [first]
        for _ in range(cfg.new_tokens - 1):
            graph.replay()
            static_pos.add_(1)  # generate.py's input_pos += 1
            new.append(static_out.clone())
            static_tok.copy_(static_out.view(1, 1))
        torch.cat([idx.view(-1), *[t.view(-1) for t in new]])

    out = _measure(dev, generate, steps)
    out["weight_bytes"] = weight_bytes
    out["flops_per_token"] = 2 * sum(p.numel() for p in model.parameters())
    out["params"] = sum(p.numel() for p in model.parameters())
    out["tokens_per_gpu_step"] = cfg.new_tokens  # gpt-fast: new tokens over generate()'s time, prefill in it
    return out


def _mpt_rank(rank: int, cfg: MptTrain, steps: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dev = _setup(rank)
    mesh = init_device_mesh("openreg", (cfg.ranks,), mesh_dim_names=("dp",))
    with torch.device("meta"):
        model = _mpt(cfg)()
    if cfg.checkpoint:  # Composer's activation checkpointing: each block, non-reentrant
        for i, block in enumerate(model.blocks):
            model.blocks[i] = checkpoint_wrapper(block, preserve_rng_state=False)
    # Composer's DEFAULT mixed precision with amp_bf16 in llm-foundry's releases: parameters gathered in
    # bf16, gradients reduced in fp32 (Composer's first FSDP releases, late 2022, gathered fp32 and reduced
    # in bf16; with those this program does not fit in 80 GB, where the published run did)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    model.to_empty(device=dev)
    # Composer's DecoupledAdamW updates one parameter at a time (no weight decay in the benchmark yamls)
    opt = torch.optim.AdamW(model.parameters(), lr=1.2e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0,
                            foreach=False)
    batch = torch.zeros(cfg.grad_accum, cfg.micro_batch, cfg.seq, dtype=torch.long)  # the loader's, on the host

    def step() -> None:
        opt.zero_grad()
        for micro in range(cfg.grad_accum):
            tokens = batch[micro].to(dev)
            targets = torch.roll(tokens, shifts=-1, dims=1)  # llm-foundry's labels: shifted, last ignored
            targets[:, -1] = -100
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                logits = model(tokens)
            # flash-attn's fused cross-entropy reads the bf16 logits (fp32 inside the kernel)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100) / cfg.grad_accum
            del logits
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()

    out = _measure(dev, step, steps)
    # llm-foundry's MFU: 3 x (2 x parameters + attention's 2 x 2 x layers x d_model x seq) per token
    params = sum(p.numel() for p in model.parameters())
    out["flops_per_token"] = 3 * (2 * params + 2 * 2 * cfg.layers * cfg.d_model * cfg.seq)
    out["params"] = params
    out["tokens_per_gpu_step"] = cfg.grad_accum * cfg.micro_batch * cfg.seq
    return out


# ---------------------------------------------------------------------------------------------------
# The rows

H100_NOTE = ("the source's H100 is the 96 GB HBM2e part at its 500 W limit (2.4 TB/s): the h100-sxm-500w "
             "profile; MFU here divides by that profile's peak, torchtitan's own by the 700 W part's")

MPT_NOTE = ("llm-foundry's MPT ran FSDP1 (flat parameters per block, no copy-in/copy-out) with its own "
            "flash attention (Triton or flash-attn) and flash-attn's fused cross-entropy; here FSDP2 and "
            "PyTorch's SDPA, costed at the profile's FlashAttention-2 figures")

LLAMA3_70B_64 = LlamaTrain(dim=8192, layers=80, heads=64, kv_heads=8, ffn_hidden=28672, ranks=64, batch=1, ac="full")
LLAMA2_13B_64 = LlamaTrain(dim=5120, layers=40, heads=40, kv_heads=40, ffn_hidden=13824, vocab=32000, seq=4096,
                           ranks=64, batch=2, ac="none")
LLAMA2_70B_64 = LlamaTrain(dim=8192, layers=80, heads=64, kv_heads=8, ffn_hidden=28672, vocab=32000, seq=4096,
                           ranks=64, batch=1, ac="op")
# torchtitan's published out-of-memory configuration (its performance document's footnote 1): Llama 2 70B at local
# batch 2 with selective op AC does not fit on 64 A100s of 80 GB; batch 1 (the row above) does.
LLAMA2_70B_64_OOM = LlamaTrain(**{**asdict(LLAMA2_70B_64), "batch": 2})

ROWS: list[Row] = [
    Row("titan-llama3.1-8b-fsdp8-h100", "h100-sxm-500w", 8, LlamaTrain(),
        {"tok_s_gpu": 5762, "mem_gib": 82.4}, "reserved",
        "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 1 (FSDP row)",
        "Llama 3.1 8B, 8 GPUs FSDP2 (full shard), local batch 2, seq 8192, bf16 params/fp32 reduce, "
        "selective per-op AC, AdamW (0.9, 0.95, wd 0.1, fused), clip 1.0, no compile, no Float8",
        notes=[H100_NOTE]),
    Row("megatron-22b-tp8-full-a100", "a100-sxm", 8, MegatronTrain(recompute="full"),
        {"step_s": 1.42}, "allocated",
        "Korthikanti et al. 2022 (arXiv 2205.05198) Table 5; config: calculon-ai/calculon "
        "validation/seqsel/tab5/megatron-22B_full.json",
        "GPT 22B (h 6144, 48 layers, 64 heads, seq 2048, vocab 51200), TP8 (all-reduce), batch 4, "
        "fp16 with fp32 main params/grads, Adam, dropout 0.1, full recompute (every layer)"),
    Row("megatron-22b-tp8-sp-sel-a100", "a100-sxm", 8, MegatronTrain(recompute="selective"),
        {"step_s": 1.10}, "allocated",
        "Korthikanti et al. 2022 (arXiv 2205.05198) Table 5; config: calculon-ai/calculon "
        "validation/seqsel/tab5/megatron-22B_seqsel.json",
        "as above, with sequence parallelism (reduce-scatter/all-gather) and selective recompute "
        "(core attention only)"),
    Row("gpt-fast-llama2-7b-decode-a100", "a100-sxm", 1, GptFastDecode(),
        {"tok_s_gpu": 104.9, "bw_gbs": 1397.31}, "allocated",
        "pytorch-labs/gpt-fast README.md, Benchmarks (Llama-2-7B, Base)",
        "Llama-2-7B bf16, batch 1, 5-token prompt, 200 new tokens, top-k 200, decode step as one graph",
        notes=["the source's A100 80GB is power-limited to 330 W (a100-sxm: 400 W)",
               "gpt-fast compiles the decode step (Inductor fuses the pointwise ops); here it is eager ops "
               "captured in one graph, since openreg refuses mode='reduce-overhead'"]),
    Row("gpt-fast-llama3-8b-decode-a100", "a100-sxm", 1,
        GptFastDecode(kv_heads=8, ffn_hidden=14336, vocab=128256, rope_base=500000.0, block_size=8192),
        {"tok_s_gpu": 94.25, "bw_gbs": 1411.95}, "allocated",
        "pytorch-labs/gpt-fast README.md, Benchmarks (Llama-3-8B, Base); config: model.py's llama-3-8b",
        "Llama-3-8B bf16 (dim 4096, 32 layers, 32 heads, 8 kv heads, FFN 14336, vocab 128256, RoPE base "
        "500000, block size 8192), batch 1, 5-token prompt, 200 new tokens, top-k 200, static KV cache of "
        "208, kv heads repeated for the query heads after the cache update, decode step as one graph",
        notes=["the source's A100 80GB is power-limited to 330 W (a100-sxm: 400 W)",
               "gpt-fast compiles the decode step (Inductor fuses the pointwise ops); here it is eager ops "
               "captured in one graph, since openreg refuses mode='reduce-overhead'"]),
    Row("mpt-7b-fsdp8-a100", "a100-sxm", 8, MptTrain(),
        {"tok_s_gpu": 4641, "mfu": 0.6423}, "allocated",
        "mosaicml/llm-foundry scripts/train/benchmarking/README.md, A100 80GB table (7b, SeqLen 2048, 8 GPUs)",
        "MPT 7B (d_model 4096, 32 layers, 32 heads, vocab 50368, learned positions, biases, low-precision "
        "LayerNorm, GELU 4x, tied output; 6,658,859,008 parameters), 8 GPUs FSDP FULL_SHARD, seq 2048, "
        "micro batch 6 x 2 accumulated (global 96), amp_bf16 with DEFAULT mixed precision (bf16 "
        "gather, fp32 reduce), no activation checkpointing, DecoupledAdamW, clip 1.0",
        notes=[MPT_NOTE]),
    Row("mpt-7b-seq32k-fsdp8-a100", "a100-sxm", 8, MptTrain(seq=32768, micro_batch=2, checkpoint=True),
        {"tok_s_gpu": 1672, "mfu": 0.4946}, "allocated",
        "mosaicml/llm-foundry scripts/train/benchmarking/README.md, A100 80GB table (7b, SeqLen 32768, 8 GPUs)",
        "MPT 7B as above at seq 32768 (6,784,688,128 parameters: positions up to 32768), 8 GPUs FSDP "
        "FULL_SHARD, micro batch 2 x 2 accumulated (global 32), amp_bf16 DEFAULT, activation "
        "checkpointing of every block, DecoupledAdamW, clip 1.0",
        notes=[MPT_NOTE]),
    Row("mpt-13b-fsdp8-a100", "a100-sxm", 8, MptTrain(d_model=5120, layers=40, heads=40, micro_batch=2, grad_accum=3),
        {"tok_s_gpu": 2262, "mfu": 0.5957}, "allocated",
        "mosaicml/llm-foundry scripts/train/benchmarking/README.md, A100 80GB table (13b, SeqLen 2048, 8 GPUs)",
        "MPT 13B (d_model 5120, 40 layers, 40 heads, vocab 50368, as MPT 7B otherwise; 12,853,954,560 "
        "parameters), 8 GPUs FSDP FULL_SHARD, seq 2048, micro batch 2 x 3 accumulated (global 48), amp_bf16 "
        "DEFAULT, no activation checkpointing, DecoupledAdamW, clip 1.0",
        notes=[MPT_NOTE]),
    Row("mpt-7b-fsdp8-h100", "h100-sxm", 8, MptTrain(micro_batch=6, grad_accum=1),
        {"tok_s_gpu": 10643, "mfu": 0.4644}, "allocated",
        "mosaicml/llm-foundry scripts/train/benchmarking/README.md, H100 80GB BF16 table (7b, SeqLen 2048, 8 GPUs)",
        "MPT 7B as above, 8 H100 80GB, FSDP FULL_SHARD, seq 2048, micro batch 6, no accumulation (global "
        "48), amp_bf16 DEFAULT, no activation checkpointing, DecoupledAdamW, clip 1.0",
        notes=[MPT_NOTE, "the source's H100 80GB is taken as the 700 W SXM part (h100-sxm); its table "
               "does not say"]),
    # Published rows this machine cannot spawn the ranks of yet
    # Rows of more ranks than this machine can spawn: one process stands in for all of them
    # (python -m torch_openreg.symmetric, issue 41; every rank of an FSDP job plays one role)
    Row("titan-llama3.1-8b-fsdp128-h100", "h100-sxm-500w", 128, LlamaTrain(ranks=128),
        {"tok_s_gpu": 5605, "mem_gib": 67.0}, "reserved",
        "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 3",
        "Llama 3.1 8B, 128 GPUs (16 nodes of 8) FSDP2, local batch 2, seq 8192, bf16 params/fp32 reduce, "
        "selective per-op AC, AdamW (fused), clip 1.0, no compile, no Float8", notes=[H100_NOTE]),
    Row("titan-llama3-8b-fsdp64-a100-sel-op", "a100-sxm", 64, LlamaTrain(ranks=64, batch=1),
        {"tok_s_gpu": 2973, "mfu": 0.582}, "reserved",
        "pytorch/torchtitan docs/performance.md", "Llama 3 8B, 64 GPUs (8 nodes of 8) FSDP2, local batch 1, "
        "seq 8192, selective op AC, otherwise as the 8-GPU row"),
    Row("titan-llama3.1-70b-fsdp32-tp8-h100", "h100-sxm-500w", 256,
        LlamaTrain(dim=8192, layers=80, heads=64, kv_heads=8, ffn_hidden=28672, ranks=256, batch=16, ac="full",
                   tp=8),
        {"tok_s_gpu": 829, "mem_gib": 71.9}, "reserved",
        "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 4 (2D row)",
        "Llama 3.1 70B, 256 GPUs as FSDP 32 x TP 8 (torchtitan's plan, sequence parallel), local batch 16, "
        "seq 8192, full AC; eager bf16 here, where the source compiled the model and ran Float8 linears",
        notes=[H100_NOTE, "sizing only: the source's torch.compile and Float8 are not run here, so the row is "
               "outside the error statistics"], compared=False),
    Row("titan-llama3.1-405b-fsdp8-tp8-pp8-h100", "h100-sxm-500w", 512,
        LlamaTrain(dim=16384, layers=126, heads=128, kv_heads=8, ffn_hidden=53248, ranks=512, batch=32, ac="full",
                   tp=8, pp=8, microbatches=32),
        {"tok_s_gpu": 100, "mem_gib": 82.5}, "reserved",
        "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 5 (1F1B row)",
        "Llama 3.1 405B (16384 dim, 126 layers, 128 heads, 8 KV heads, FFN 53248), 512 GPUs as PP 8 x FSDP 8 x "
        "TP 8, 1F1B over 32 microbatches of one sequence, local batch 32, seq 8192, full AC; eager bf16 here, "
        "where the source compiled the model and ran Float8 linears and async TP",
        notes=[H100_NOTE, "sizing only, as the 70B row; eight stand-in processes, one per stage"], compared=False),
    Row("titan-llama3-8b-fsdp64-a100-sel-layer", "a100-sxm", 64, LlamaTrain(ranks=64, batch=1, ac="layer"),
        {"tok_s_gpu": 2904, "mfu": 0.568}, "reserved", "pytorch/torchtitan docs/performance.md",
        "Llama 3 8B, 64 GPUs (8 nodes of 8) FSDP2, local batch 1, seq 8192, selective layer AC (every second "
        "block), otherwise as the 8-GPU row"),
    Row("titan-llama3-70b-fsdp64-a100-full", "a100-sxm", 64, LLAMA3_70B_64,
        {"tok_s_gpu": 331, "mfu": 0.517}, "reserved", "pytorch/torchtitan docs/performance.md",
        "Llama 3 70B (8192 dim, 80 layers, 64 heads, 8 KV heads, FFN 28672), 64 GPUs FSDP2, local batch 1, "
        "seq 8192, full AC"),
    Row("titan-llama2-13b-fsdp64-a100", "a100-sxm", 64, LLAMA2_13B_64,
        {"tok_s_gpu": 2162, "mfu": 0.611}, "reserved", "pytorch/torchtitan docs/performance.md",
        "Llama 2 13B (5120 dim, 40 layers, 40 heads, FFN 13824, vocab 32000), 64 GPUs FSDP2, local batch 2, "
        "seq 4096, no AC"),
    Row("titan-llama2-70b-fsdp64-a100-sel-op", "a100-sxm", 64, LLAMA2_70B_64,
        {"tok_s_gpu": 355, "mfu": 0.508}, "reserved", "pytorch/torchtitan docs/performance.md",
        "Llama 2 70B (8192 dim, 80 layers, 64 heads, 8 KV heads, FFN 28672, vocab 32000), 64 GPUs FSDP2, "
        "local batch 1, seq 4096, selective op AC (the source's footnote: batch 2 runs out of memory)"),
    Row("titan-llama2-70b-fsdp64-a100-sel-op-b2", "a100-sxm", 64, LLAMA2_70B_64_OOM, {}, "reserved",
        "pytorch/torchtitan docs/performance.md, footnote 1 (\"local batch size 2 will cause an OOM error when "
        "selective activation checkpointing is used\")",
        "Llama 2 70B as above, local batch 2, selective op AC: published out of memory", expect_oom=True),
    Row("titan-llama2-70b-fsdp64-a100-full-b2", "a100-sxm", 64, LlamaTrain(**{**asdict(LLAMA2_70B_64), "batch": 2,
                                                                            "ac": "full"}),
        {"tok_s_gpu": 353, "mfu": 0.505}, "reserved", "pytorch/torchtitan docs/performance.md",
        "Llama 2 70B as above, local batch 2, full AC"),
    Row("fms-fsdp-llama2-7b-hsdp128-a100", "a100-sxm", 128,
        LlamaTrain(dim=4096, layers=32, heads=32, kv_heads=32, ffn_hidden=11008, vocab=32000, seq=4096, ranks=128,
                   batch=2, ac="none", hsdp_shard=8),
        {"tok_s_gpu": 3760, "mfu": 0.57}, "reserved",
        "foundation-model-stack/fms-fsdp README.md", "Llama 2 7B, 128 GPUs HSDP (sharded within each node of "
        "8, replicated across the 16), batch 2, seq 4096, no AC, bf16, AdamW (fused)"),
    Row("fms-fsdp-llama2-13b-hsdp128-a100", "a100-sxm", 128, LLAMA2_13B_64.__class__(
        **{**asdict(LLAMA2_13B_64), "ranks": 128, "batch": 1, "hsdp_shard": 8}),
        {"tok_s_gpu": 1700}, "reserved",
        "foundation-model-stack/fms-fsdp README.md", "Llama 2 13B, 128 GPUs HSDP (as above), batch 1, seq 4096, "
        "no AC"),
    Row("fms-fsdp-llama2-70b-fsdp128-a100", "a100-sxm", 128, LLAMA2_70B_64.__class__(
        **{**asdict(LLAMA2_70B_64), "ranks": 128, "batch": 6, "ac": "full"}),
        {"tok_s_gpu": 380}, "reserved",
        "foundation-model-stack/fms-fsdp README.md", "Llama 2 70B, 128 GPUs FSDP, batch 6, seq 4096, activation "
        "checkpointing (every block)"),
    # Published rows this machine cannot run yet
    Row("megatron-175b-tp8pp8-sp-sel-a100", "a100-sxm", 64, None, {"step_s": 13.75}, "allocated",
        "Korthikanti et al. 2022 Table 5; calculon validation/seqsel/tab5/gpt3-175B_seqsel.json",
        "GPT-3 175B, TP8 PP8 on 64 GPUs, sequence parallel + selective recompute", NOT_RUN_MEGATRON_PP),
    # Published rows of 8 GPUs or fewer that no faithful plain PyTorch program reproduces here
    Row("titan-llama3.1-8b-fsdp8-seq32k-h100", "h100-sxm-500w", 8, None, {"tok_s_gpu": 3890, "mem_gib": 83.9},
        "reserved", "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 2 (FSDP 8, CP 1)",
        "Llama 3.1 8B, 8 GPUs FSDP, seq 32768, local batch 1, full AC, torch.compile + Float8",
        "not run: needs torchao's Float8 linears (torchao is not installed here) and torch.compile of the "
        "whole model on 8 ranks", [H100_NOTE]),
    Row("gpt-fast-llama2-7b-decode-tp8-a100", "a100-sxm", 8, None, {"tok_s_gpu": 328.43 / 8, "bw_gbs": 704.10},
        "allocated", "pytorch-labs/gpt-fast README.md, Tensor Parallelism (Llama-2-7B, 8 GPUs)",
        "Llama-2-7B bf16, 8-way tensor parallel decode, batch 1, 5-token prompt: 328.43 tokens/s (41.1 per GPU)",
        "not run: the decode step's all-reduces run inside its captured CUDA graph, which openreg cannot "
        "capture (docs/graphs.md); run eagerly, the step would be bound by the host's issue of ~1,600 "
        "kernels a token, which the source's graph avoids"),
    Row("vllm-llama3.1-70b-fp8-tp8-bs1-mi300x", "mi300x", 8, None, {"tok_s_gpu": 2048 / 15.254 / 8}, "allocated",
        "AMD ROCm performance results page (amd.com developer/resources/rocm-hub/dev-ai/performance-results), "
        "vLLM latency table, container rocm6.4.1_vllm_0.10.1_20250909",
        "Llama 3.1 70B FP8 (amd/Llama-3.1-70B-Instruct-FP8-KV), vLLM, TP8 on 8 MI300X (750 W), batch 1, "
        "128 prompt tokens, 2048 new: 15.254 s (134 tokens/s per request, 16.8 per GPU)",
        "not run: vLLM's FP8 GEMMs and paged-attention kernels are not a plain PyTorch program, and its "
        "decode step's all-reduces run inside captured graphs, which openreg does not capture"),
]


SYMMETRIC_ABOVE = 8  # rows of more ranks run as one process per role (python -m torch_openreg.symmetric)


def _symmetric(row: Row, steps: int) -> list[dict]:
    """A row's job in symmetric-rank mode: one process stands in for its ranks (one role: FSDP)."""
    import json
    import subprocess
    import sys
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env.update({"OPENREG_DEVICE_PROFILE": row.profile, "PYTHONPATH": os.pathsep.join(
        [root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)})
    env.pop("OPENREG_RANKS_PER_NODE", None)
    with tempfile.TemporaryDirectory() as out:
        config = json.dumps({"type": type(row.config).__name__, "fields": asdict(row.config)})
        pp = getattr(row.config, "pp", 1)
        layout = ["--world-size", str(row.gpus)] if pp == 1 else [
            "--mesh", f"pp={pp},dp={row.gpus // (pp * row.config.tp)},tp={row.config.tp}", "--vary", "pp"]
        cmd = [sys.executable, "-m", "torch_openreg.symmetric", *layout, os.path.abspath(__file__), config,
               str(steps), out]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"row {row.name} in symmetric-rank mode failed:\n{done.stderr[-4000:]}")
        results = []
        for name in sorted(os.listdir(out), key=lambda n: int(n[4:-5])):  # rank<N>.json, stage order
            with open(os.path.join(out, name)) as f:
                results.append(json.load(f))
        return results


def _stand_in_main(argv: list[str]) -> None:
    """A stand-in's process (``_symmetric``): runs a row's program (its config as JSON) as its rank and
    writes the result."""
    import json

    import torch.distributed as dist

    spec, steps, out = json.loads(argv[0]), int(argv[1]), argv[2]
    config_type = next(t for t in RUNNERS if t.__name__ == spec["type"])
    config = config_type(**spec["fields"])
    dist.init_process_group()
    rank = dist.get_rank()
    try:
        result = RUNNERS[config_type](rank, config, steps)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


def _spawn(row: Row, runner: Callable[..., dict], steps: int) -> list[dict]:
    from . import spawn

    if row.gpus > SYMMETRIC_ABOVE:
        return _symmetric(row, steps)
    saved = dict(os.environ)
    os.environ.update({"OPENREG_DEVICE_PROFILE": row.profile, "OPENREG_EXECUTE": "timing"})
    os.environ.pop("OPENREG_RANKS_PER_NODE", None)
    try:
        return spawn.run(runner, row.config, steps, world=row.gpus, timeout_s=1800, pg_timeout_s=1200)
    finally:
        os.environ.clear()
        os.environ.update(saved)


RUNNERS: dict[type, Callable[..., dict]] = {LlamaTrain: _llama_rank, MegatronTrain: _megatron_rank,
                                            GptFastDecode: _decode_rank, MptTrain: _mpt_rank}


def run_row(row: Row, steps: int = 2) -> dict[str, Any]:
    """Runs a row's program on its ranks; returns the modelled figures beside the published ones (for a
    row the source reports out of memory: whether it ran out of memory here)."""
    t0 = time.monotonic()
    if row.expect_oom:
        try:
            _spawn(row, RUNNERS[type(row.config)], steps)
        except (RuntimeError, AssertionError) as err:
            if "OutOfMemoryError" not in str(err):
                raise
            return {"row": row.name, "profile": row.profile, "gpus": row.gpus, "config": asdict(row.config),
                    "oom": True, "published": {"oom": True}, "source": row.source, "setup": row.setup,
                    "error": str(err)[-600:], "wall_s": time.monotonic() - t0}
        return {"row": row.name, "profile": row.profile, "gpus": row.gpus, "config": asdict(row.config),
                "oom": False, "published": {"oom": True}, "source": row.source, "setup": row.setup,
                "wall_s": time.monotonic() - t0}
    ranks = _spawn(row, RUNNERS[type(row.config)], steps)
    wall = time.monotonic() - t0
    r0 = ranks[0]
    step = max(r["step_s"] for r in ranks)  # the step ends when the slowest rank's does
    # the largest of the ranks' peaks (a pipeline's stages differ; torchtitan reports the largest)
    peak = {"reserved": max(r["peak_reserved"] for r in ranks), "allocated": max(r["peak_allocated"] for r in ranks)}
    tok = r0["tokens_per_gpu_step"] / step
    peak_flops = r0["peak_flops"]  # the profile's dense bf16 peak, as the sources' MFU divides by
    result = {
        "row": row.name, "profile": row.profile, "gpus": row.gpus, "config": asdict(row.config),
        "step_s": step, "tok_s_gpu": tok, "mfu": tok * r0["flops_per_token"] / peak_flops,
        "mem_gib": peak[row.mem_stat] / GIB, "mem_stat": row.mem_stat,
        "ranks_agree": len({r["step_s"] for r in ranks}) == 1,
        "rank0": r0, "published": row.published, "source": row.source, "setup": row.setup,
        "notes": row.notes, "wall_s": wall, "max_rank_rss_gib": max(r["rss"] for r in ranks) / GIB,
        "sum_rank_rss_gib": sum(r["rss"] for r in ranks) / GIB,
    }
    if "weight_bytes" in r0:  # decode: the effective bandwidth gpt-fast reports (weights read per token)
        result["bw_gbs"] = r0["weight_bytes"] * tok / 1e9
    pub = dict(row.published)
    if "step_s" in pub and "tok_s_gpu" not in pub:  # a step time: its tokens per GPU per second
        pub["tok_s_gpu"] = r0["tokens_per_gpu_step"] / pub["step_s"]
    if "mfu" not in pub and row.gpus > 1:  # derived from the published throughput with the same formula
        pub["mfu"] = pub["tok_s_gpu"] * r0["flops_per_token"] / peak_flops
        result["published_mfu_derived"] = True
    result["published"] = pub
    result["ratio"] = tok / pub["tok_s_gpu"]
    if "mem_gib" in pub:
        result["mem_ratio"] = result["mem_gib"] / pub["mem_gib"]
    return result


if __name__ == "__main__":  # a stand-in of a row run in symmetric-rank mode (``_symmetric``)
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from tests.support import calibration as _self  # the rows and programs, as the package module

    _self._stand_in_main(sys.argv[1:])
