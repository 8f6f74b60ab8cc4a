"""CUDA's named attention kernels on openreg (Note [CUDA's attention kernels on openreg] in
backend/ops/AttentionKernels.cpp): _flash_attention_forward/_backward (dense and varlen),
_efficient_attention_forward/_backward and the SDPA entry points over them, with the values attention's
math computes on the CPU and the outputs (shapes, dtypes, layouts, random-number state) CUDA's kernels
return."""

import pytest
import torch
from torch.nn.attention.varlen import varlen_attn

aten = torch.ops.aten


def _reference(q, k, v, causal, bias=None, scale=None):
    """Attention's math in float64 on the CPU, on (batch, heads, seq, dim) tensors: output and logsumexp."""
    q, k, v = (t.double() for t in (q, k, v))
    if k.shape[1] != q.shape[1]:  # grouped-query attention: each key/value head serves a group of queries
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    scores = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if bias is not None:
        scores = scores + bias.double()
    if causal:
        L, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)


def _leaves(*tensors, device="openreg"):
    return [t.detach().to(device).requires_grad_() for t in tensors]


def _randn(*shape, dtype, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32).to(dtype)


def _tol(dtype):
    return {"atol": 2e-2, "rtol": 2e-2} if dtype in (torch.bfloat16, torch.float16) else {"atol": 1e-5, "rtol": 1e-4}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_flash_attention_forward_and_backward_match_the_math(dtype, causal, kv_heads):
    B, L, H, D = 2, 24, 4, 16  # (batch, seq, heads, dim), the order the flash op takes
    q, k, v = _randn(B, L, H, D, dtype=dtype, seed=0), _randn(B, L, kv_heads, D, dtype=dtype, seed=1), \
        _randn(B, L, kv_heads, D, dtype=dtype, seed=2)
    args = _leaves(q, k, v)
    out, lse, rng_state, unused, debug_mask = aten._flash_attention_forward(
        *args, None, None, L, L, 0.0, causal, False, scale=0.3)
    want_out, want_lse = _reference(*(t.transpose(1, 2) for t in (q, k, v)), causal, scale=0.3)
    torch.testing.assert_close(out.cpu().double(), want_out.transpose(1, 2), **_tol(dtype))
    torch.testing.assert_close(lse.cpu().double(), want_lse, atol=1e-3, rtol=1e-3)
    # What CUDA's kernel returns (torch's meta function for the op): the output laid out like the query,
    # a float32 (batch, heads, seq) logsumexp, a 2-element uint64 rng state, an unused uint64 scalar.
    assert out.shape == q.shape and out.stride() == args[0].stride() and out.dtype == dtype
    assert lse.shape == (B, H, L) and lse.dtype == torch.float32 and lse.is_contiguous()
    assert rng_state.shape == (2,) and rng_state.dtype == torch.uint64 and rng_state.device == out.device
    assert unused.shape == () and unused.dtype == torch.uint64 and debug_mask.numel() == 0

    grad = _randn(*out.shape, dtype=dtype, seed=3)
    out.backward(grad.to("openreg"))
    ref = _leaves(q.double(), k.double(), v.double(), device="cpu")
    _reference(*(t.transpose(1, 2) for t in ref), causal, scale=0.3)[0].transpose(1, 2).backward(grad.double())
    for got, want in zip(args, ref):
        assert got.grad.shape == got.shape and got.grad.stride() == got.stride()
        torch.testing.assert_close(got.grad.cpu().double(), want.grad, **_tol(dtype))


def _packed(lengths, H, D, dtype, seed):
    cum = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return [_randn(int(cum[-1]), H, D, dtype=dtype, seed=seed + i) for i in range(3)], cum


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_flash_attention_attends_within_each_sequence(causal):
    lengths, H, D = [5, 11, 0, 8], 4, 16
    (q, k, v), cum = _packed(lengths, H, D, torch.bfloat16, seed=10)
    args = _leaves(q, k, v)
    cum_d = cum.to("openreg")
    out, lse, *_ = aten._flash_attention_forward(*args, cum_d, cum_d, max(lengths), max(lengths), 0.0, causal, False)
    assert out.shape == q.shape and lse.shape == (H, q.shape[0]) and lse.dtype == torch.float32
    grad = _randn(*q.shape, dtype=torch.bfloat16, seed=20)
    out.backward(grad.to("openreg"))
    ref = _leaves(q.double(), k.double(), v.double(), device="cpu")
    for i in range(len(lengths)):
        s, e = int(cum[i]), int(cum[i + 1])
        if s == e:
            continue
        one = [t[s:e].transpose(0, 1).unsqueeze(0) for t in ref]
        want_out, want_lse = _reference(*one, causal)
        torch.testing.assert_close(out[s:e].cpu().double(), want_out[0].transpose(0, 1).detach(), atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[:, s:e].cpu().double(), want_lse[0].detach(), atol=1e-3, rtol=1e-3)
        want_out[0].transpose(0, 1).backward(grad[s:e].double())
    for got, want in zip(args, ref):
        torch.testing.assert_close(got.grad.cpu().double(), want.grad, atol=2e-2, rtol=2e-2)


def test_torch_varlen_attn_runs_on_openreg_as_on_the_math():
    """torch.nn.attention.varlen.varlen_attn, torchtitan's varlen attention, calls the flash op by name."""
    lengths, H, D = [7, 9], 2, 8
    (q, k, v), cum = _packed(lengths, H, D, torch.bfloat16, seed=30)
    args = _leaves(q, k, v)
    cum_d = cum.to("openreg")
    out = varlen_attn(*args, cum_d, cum_d, max(lengths), max(lengths), window_size=(-1, 0))  # causal
    out.sum().backward()
    want = torch.cat([_reference(*(t[s:e].transpose(0, 1).unsqueeze(0) for t in (q, k, v)), True)[0][0].transpose(0, 1)
                      for s, e in zip(cum[:-1].tolist(), cum[1:].tolist())])
    torch.testing.assert_close(out.detach().cpu().double(), want, atol=2e-2, rtol=2e-2)
    assert all(a.grad is not None and a.grad.shape == a.shape for a in args)


@pytest.mark.parametrize("mask_type", [0, 1, 2])
@pytest.mark.parametrize("with_bias", [False, True])
def test_efficient_attention_forward_and_backward_match_the_math(mask_type, with_bias):
    B, L, H, D = 2, 40, 3, 8
    q, k, v = (_randn(B, L, H, D, dtype=torch.float32, seed=40 + i) for i in range(3))
    bias = _randn(B, H, L, L, dtype=torch.float32, seed=50) if with_bias else None
    args = _leaves(q, k, v)
    out, lse, seed, offset, max_q, max_k = aten._efficient_attention_forward(
        *args, None if bias is None else bias.to("openreg"), None, None, None, None, 0.0, mask_type, True)
    want_out, want_lse = _reference(*(t.transpose(1, 2) for t in (q, k, v)), mask_type != 0, bias)
    torch.testing.assert_close(out.cpu().double(), want_out.transpose(1, 2), atol=1e-5, rtol=1e-4)
    # The logsumexp's length is padded to a multiple of 32, as the CUDA kernel's.
    assert lse.shape == (B, H, 64) and lse.dtype == torch.float32 and (max_q, max_k) == (L, L)
    torch.testing.assert_close(lse[..., :L].cpu().double(), want_lse, atol=1e-5, rtol=1e-4)
    assert seed.shape == offset.shape == () and seed.dtype == offset.dtype == torch.int64
    assert out.is_contiguous() and out.shape == (B, L, H, D)

    grad = _randn(B, L, H, D, dtype=torch.float32, seed=60)
    got = aten._efficient_attention_backward(
        grad.to("openreg"), *(a.detach() for a in args), None if bias is None else bias.to("openreg"), out.detach(),
        None, None, L, L, lse.detach(), 0.0, seed, offset, mask_type, False)
    ref = _leaves(q.double(), k.double(), v.double(), device="cpu")
    _reference(*(t.transpose(1, 2) for t in ref), mask_type != 0, bias)[0].transpose(1, 2).backward(grad.double())
    for g, want in zip(got[:3], ref):
        torch.testing.assert_close(g.cpu().double(), want.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_flash_and_efficient_entry_points_and_their_backwards(causal):
    B, H, L, D = 2, 4, 16, 8  # (batch, heads, seq, dim), as scaled_dot_product_attention's
    qkv = [_randn(B, L, H, D, dtype=torch.bfloat16, seed=70 + i).transpose(1, 2) for i in range(3)]
    want, _ = _reference(*qkv, causal)

    args = _leaves(*qkv)
    out, lse, cum_q, cum_k, max_q, max_k, rng_state, unused, _ = aten._scaled_dot_product_flash_attention(
        *args, 0.0, causal)
    assert lse.shape == (B, H, L) and rng_state.dtype == torch.uint64 and (max_q, max_k) == (L, L)
    torch.testing.assert_close(out.detach().cpu().double(), want, atol=2e-2, rtol=2e-2)
    out.sum().backward()  # through _scaled_dot_product_flash_attention_backward
    flash_grads = [a.grad.cpu() for a in args]

    args = _leaves(*(t.float() for t in qkv))
    out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(*args, None, True, 0.0, causal)
    assert lse.shape == (B, H, 32) and seed.dtype == torch.int64
    torch.testing.assert_close(out.detach().cpu().double(), want, atol=1e-5, rtol=1e-4)
    out.sum().backward()  # through _scaled_dot_product_efficient_attention_backward
    ref = _leaves(*(t.double() for t in qkv), device="cpu")
    _reference(*ref, causal)[0].sum().backward()
    for flash, efficient, want in zip(flash_grads, args, ref):
        torch.testing.assert_close(efficient.grad.cpu().double(), want.grad, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(flash.double(), want.grad, atol=3e-2, rtol=3e-2)


def test_inputs_cuda_refuses_are_refused_with_its_message():
    q = torch.randn(1, 8, 2, 16, device="openreg")
    with pytest.raises(RuntimeError, match="FlashAttention only support fp16 and bf16 data type"):
        aten._flash_attention_forward(q, q, q, None, None, 8, 8, 0.0, False, False)
    h = q.half()
    with pytest.raises(RuntimeError, match="Number of heads in key/value must divide number of heads in query"):
        aten._flash_attention_forward(h, h[:, :, :1].expand(1, 8, 3, 16), h, None, None, 8, 8, 0.0, False, False)
    with pytest.raises(NotImplementedError, match="without dropout"):
        aten._flash_attention_forward(h, h, h, None, None, 8, 8, 0.1, False, False)
    with pytest.raises(NotImplementedError, match="sliding window"):
        aten._flash_attention_forward(h, h, h, None, None, 8, 8, 0.0, False, False, window_size_left=2,
                                      window_size_right=0)
    with pytest.raises(RuntimeError, match="supports float32, float16 and bfloat16"):
        aten._efficient_attention_forward(q.double(), q.double(), q.double(), None, None, None, None, None, 0.0, 0)
    assert torch.equal(torch.ones(2, device="openreg").cpu(), torch.ones(2))  # the device still works


def test_flash_attention_runs_in_stream_order_on_a_side_stream():
    q, k, v = (_randn(2, 16, 4, 8, dtype=torch.bfloat16, seed=80 + i).to("openreg") for i in range(3))
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        scaled = q * 2  # queued before the attention that reads it, on the same stream
        out = aten._flash_attention_forward(scaled, k, v, None, None, 16, 16, 0.0, True, False)[0]
    torch.openreg.current_stream().wait_stream(side)
    want, _ = _reference(*(t.cpu().transpose(1, 2) for t in (q * 2, k, v)), True)
    torch.testing.assert_close(out.cpu().double(), want.transpose(1, 2), atol=2e-2, rtol=2e-2)
