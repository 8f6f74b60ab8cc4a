"""scaled_dot_product_attention on openreg: the fused kernel where CPU runs its flash kernel, the math path
elsewhere, with CPU's values, gradients and layouts (Note [Fused attention on openreg] in
backend/ops/Attention.cpp)."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"
MATH = "aten::_scaled_dot_product_attention_math"


def _ops_of(fn):
    """What fn returns, and the names of the aten ops it called."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = fn()
    return result, {e.name for e in prof.events()}


def _inputs(layout, dtype=torch.float32, kv_heads=4):
    torch.manual_seed(0)
    b, h, L, d = 2, 4, 8, 16
    if layout == "bhld":  # contiguous (batch, heads, length, head_dim)
        q = torch.randn(b, h, L, d, dtype=dtype)
        k, v = (torch.randn(b, kv_heads, L, d, dtype=dtype) for _ in range(2))
    else:  # heads split from a (batch, length, heads * head_dim) projection, as transformer blocks do
        q = torch.randn(b, L, h, d, dtype=dtype).transpose(1, 2)
        k, v = (torch.randn(b, L, kv_heads, d, dtype=dtype).transpose(1, 2) for _ in range(2))
    return q, k, v


MASKS = {
    "none": lambda L: None,
    "causal": lambda L: "causal",
    "bool": lambda L: torch.rand(L, L, generator=torch.Generator().manual_seed(1)) > 0.3,
    "float": lambda L: torch.randn(2, 1, L, L, generator=torch.Generator().manual_seed(2)),
}


def _attend(q, k, v, mask, device, **kw):
    args = [t.to(device).detach().requires_grad_() for t in (q, k, v)]
    attn_mask = None if mask in (None, "causal") else mask.to(device)
    out = F.scaled_dot_product_attention(*args, attn_mask=attn_mask, is_causal=mask == "causal", **kw)
    return args, out


@pytest.mark.parametrize("layout", ["bhld", "blhd"])
@pytest.mark.parametrize("mask_name", sorted(MASKS))
def test_fused_path_matches_cpu_values_gradients_and_layouts(layout, mask_name):
    q, k, v = _inputs(layout)
    mask = MASKS[mask_name](q.shape[2])
    cpu_args, want = _attend(q, k, v, mask, "cpu")
    (args, got), ops = _ops_of(lambda: _attend(q, k, v, mask, "openreg"))
    assert FUSED in ops and MATH not in ops
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad.to("openreg"))
    torch.testing.assert_close(got.cpu(), want)
    assert got.stride() == want.stride()
    for mine, cpus in zip(args, cpu_args):
        torch.testing.assert_close(mine.grad.cpu(), cpus.grad)
        assert mine.grad.stride() == cpus.grad.stride()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_path_in_reduced_precision_matches_cpu(dtype):
    q, k, v = _inputs("blhd", dtype)
    _, want = _attend(q, k, v, "causal", "cpu")
    (_, got), ops = _ops_of(lambda: _attend(q, k, v, "causal", "openreg"))
    assert FUSED in ops
    torch.testing.assert_close(got.cpu(), want)


def test_grouped_query_attention_takes_the_fused_path():
    q, k, v = _inputs("bhld", kv_heads=2)
    cpu_args, want = _attend(q, k, v, "causal", "cpu", enable_gqa=True)
    (args, got), ops = _ops_of(lambda: _attend(q, k, v, "causal", "openreg", enable_gqa=True))
    assert FUSED in ops
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(args[1].grad.cpu(), cpu_args[1].grad)


def test_dropout_float64_and_a_mask_that_needs_a_gradient_take_the_math_path():
    q, k, v = _inputs("bhld")
    # Dropout: the math path draws its mask from openreg's generator (the fused kernel has no dropout).
    (_, out), ops = _ops_of(lambda: _attend(q, k, v, None, "openreg", dropout_p=0.5))
    assert MATH in ops and FUSED not in ops
    torch.openreg.manual_seed(3)
    first = _attend(q, k, v, None, "openreg", dropout_p=0.5)[1].cpu()
    torch.openreg.manual_seed(3)
    torch.testing.assert_close(_attend(q, k, v, None, "openreg", dropout_p=0.5)[1].cpu(), first)
    # float64: the overrideable op's logsumexp is float32.
    qd, kd, vd = (t.double() for t in (q, k, v))
    (_, got), ops = _ops_of(lambda: _attend(qd, kd, vd, "causal", "openreg"))
    assert MATH in ops and FUSED not in ops
    torch.testing.assert_close(got.cpu(), _attend(qd, kd, vd, "causal", "cpu")[1])
    # A float mask that needs a gradient gets one (CPU's flash backward computes none).
    mask = torch.randn(8, 8)
    mine = mask.to("openreg").requires_grad_()
    got, ops = _ops_of(lambda: F.scaled_dot_product_attention(
        q.to("openreg"), k.to("openreg"), v.to("openreg"), attn_mask=mine))
    assert MATH in ops and FUSED not in ops
    got.sum().backward()
    with sdpa_kernel(SDPBackend.MATH):
        cpus = mask.clone().requires_grad_()
        F.scaled_dot_product_attention(q, k, v, attn_mask=cpus).sum().backward()
    torch.testing.assert_close(mine.grad.cpu(), cpus.grad)


@pytest.mark.parametrize("backends, path", [
    ([SDPBackend.MATH], MATH),
    ([SDPBackend.FLASH_ATTENTION], FUSED),
    ([SDPBackend.OVERRIDEABLE], FUSED),
    ([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH], MATH),
])
def test_sdpa_kernel_selects_the_path(backends, path):
    q, k, v = _inputs("bhld")
    with sdpa_kernel(backends):
        (_, got), ops = _ops_of(lambda: _attend(q, k, v, "causal", "openreg"))
    assert path in ops and ({FUSED, MATH} - {path}).isdisjoint(ops)
    torch.testing.assert_close(got.cpu(), _attend(q, k, v, "causal", "cpu")[1])


def test_no_enabled_kernel_raises_as_on_cpu():
    q, k, v = _inputs("bhld")
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        with pytest.raises(RuntimeError) as on_cpu:
            F.scaled_dot_product_attention(q, k, v)
        with pytest.raises(RuntimeError) as on_openreg:
            F.scaled_dot_product_attention(q.to("openreg"), k.to("openreg"), v.to("openreg"))
    for raised in (on_cpu, on_openreg):
        assert str(raised.value).startswith("No viable backend for scaled_dot_product_attention was found")
    assert torch.equal(torch.ones(2, device="openreg").cpu(), torch.ones(2))  # the device still works


def test_fused_attention_runs_in_stream_order_on_a_side_stream():
    q, k, v = (t.to("openreg") for t in _inputs("blhd"))
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        scaled = q * 2  # queued before the attention that reads it, on the same stream
        out = F.scaled_dot_product_attention(scaled, k, v, is_causal=True)
    torch.openreg.current_stream().wait_stream(side)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q.cpu() * 2, k.cpu(), v.cpu(),
                                                                            is_causal=True))


def test_compiled_attention_keeps_one_fused_kernel_and_matches_eager():
    from torch._inductor.utils import run_and_get_code

    inputs = _inputs("blhd")

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def step(fn):
        q, k, v = (t.to("openreg").requires_grad_() for t in inputs)
        out = fn(q, k, v)
        (out * out).sum().backward()
        return out.detach(), q.grad, k.grad, v.grad

    want = step(attention)
    with torch._inductor.config.patch(force_disable_caches=True):  # generate the code, to read it
        got, codes = run_and_get_code(step, torch.compile(attention))
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w.cpu())
    code = "\n".join(codes)
    assert "_scaled_dot_product_fused_attention_overrideable.default" in code
    assert "_scaled_dot_product_fused_attention_overrideable_backward.default" in code
    assert "extern_kernels.bmm" not in code  # not decomposed into the math path
