"""scaled_dot_product_attention on openreg: the kernel CUDA would pick (flash for float16/bfloat16 without a
mask, memory-efficient attention for float32 and masks, math elsewhere), called by CUDA's op names, with
CPU's values and gradients (Note [Fused attention on openreg] in backend/ops/Attention.cpp)."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

FLASH = "aten::_scaled_dot_product_flash_attention"
EFFICIENT = "aten::_scaled_dot_product_efficient_attention"
MATH = "aten::_scaled_dot_product_attention_math"
PATHS = {FLASH, EFFICIENT, MATH}


def _took(ops, path):
    """Whether the ops ran `path` and neither of the other two."""
    return path in ops and (PATHS - {path}).isdisjoint(ops)


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
def test_float32_takes_efficient_attention_with_cpus_values_gradients_and_layouts(layout, mask_name):
    # CUDA runs float32 (masked or not) on its memory-efficient kernel.
    q, k, v = _inputs(layout)
    mask = MASKS[mask_name](q.shape[2])
    cpu_args, want = _attend(q, k, v, mask, "cpu")
    (args, got), ops = _ops_of(lambda: _attend(q, k, v, mask, "openreg"))
    assert _took(ops, EFFICIENT)
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad.to("openreg"))
    torch.testing.assert_close(got.cpu(), want)
    # CUDA's output layout, as torch's meta function declares it: (batch, length, heads, head_dim) in
    # memory, whatever the inputs' layout; a leaf's gradient takes the leaf's layout (autograd's contract).
    assert got.stride() == torch.empty_permuted(want.shape, (0, 2, 1, 3)).stride()
    for mine, cpus in zip(args, cpu_args):
        torch.testing.assert_close(mine.grad.cpu(), cpus.grad)
        assert mine.grad.stride() == mine.stride()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mask_name, path", [("none", FLASH), ("causal", FLASH), ("float", EFFICIENT),
                                             ("bool", EFFICIENT)])
def test_reduced_precision_takes_flash_without_a_mask_and_efficient_with_one(dtype, mask_name, path):
    q, k, v = _inputs("blhd", dtype)
    mask = MASKS[mask_name](q.shape[2])
    if mask is not None and mask != "causal" and mask.dtype != torch.bool:
        mask = mask.to(dtype)
    cpu_args, want = _attend(q, k, v, mask, "cpu")
    (args, got), ops = _ops_of(lambda: _attend(q, k, v, mask, "openreg"))
    assert _took(ops, path)
    torch.testing.assert_close(got.cpu(), want)
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad.to("openreg"))
    for mine, cpus in zip(args, cpu_args):
        torch.testing.assert_close(mine.grad.cpu(), cpus.grad)


@pytest.mark.parametrize("dtype, path", [(torch.bfloat16, FLASH), (torch.float32, MATH)])
def test_grouped_query_attention_takes_flash_in_reduced_precision(dtype, path):
    # Flash takes fewer key/value heads; openreg's efficient kernel does not, so float32 runs math.
    q, k, v = _inputs("bhld", dtype, kv_heads=2)
    cpu_args, want = _attend(q, k, v, "causal", "cpu", enable_gqa=True)
    (args, got), ops = _ops_of(lambda: _attend(q, k, v, "causal", "openreg", enable_gqa=True))
    assert _took(ops, path)
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(args[1].grad.cpu(), cpu_args[1].grad)


def test_dropout_float64_and_a_mask_that_needs_a_gradient_take_the_math_path():
    q, k, v = _inputs("bhld")
    # Dropout: the math path draws its mask from openreg's generator (CUDA's fused kernels draw Philox
    # numbers openreg cannot reproduce).
    (_, out), ops = _ops_of(lambda: _attend(q, k, v, None, "openreg", dropout_p=0.5))
    assert _took(ops, MATH)
    torch.openreg.manual_seed(3)
    first = _attend(q, k, v, None, "openreg", dropout_p=0.5)[1].cpu()
    torch.openreg.manual_seed(3)
    torch.testing.assert_close(_attend(q, k, v, None, "openreg", dropout_p=0.5)[1].cpu(), first)
    # float64: no fused kernel on CUDA either.
    qd, kd, vd = (t.double() for t in (q, k, v))
    (_, got), ops = _ops_of(lambda: _attend(qd, kd, vd, "causal", "openreg"))
    assert _took(ops, MATH)
    torch.testing.assert_close(got.cpu(), _attend(qd, kd, vd, "causal", "cpu")[1])
    # A float mask that needs a gradient gets one (openreg's efficient kernel computes none).
    mask = torch.randn(8, 8)
    mine = mask.to("openreg").requires_grad_()
    got, ops = _ops_of(lambda: F.scaled_dot_product_attention(
        q.to("openreg"), k.to("openreg"), v.to("openreg"), attn_mask=mine))
    assert _took(ops, MATH)
    got.sum().backward()
    with sdpa_kernel(SDPBackend.MATH):
        cpus = mask.clone().requires_grad_()
        F.scaled_dot_product_attention(q, k, v, attn_mask=cpus).sum().backward()
    torch.testing.assert_close(mine.grad.cpu(), cpus.grad)


@pytest.mark.parametrize("backends, path", [
    ([SDPBackend.MATH], MATH),
    ([SDPBackend.FLASH_ATTENTION], FLASH),
    ([SDPBackend.EFFICIENT_ATTENTION], EFFICIENT),
    ([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH], FLASH),
    ([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH], EFFICIENT),
])
def test_sdpa_kernel_selects_the_path(backends, path):
    q, k, v = _inputs("bhld", torch.bfloat16)
    with sdpa_kernel(backends):
        (_, got), ops = _ops_of(lambda: _attend(q, k, v, "causal", "openreg"))
        choice = torch._fused_sdp_choice(*(t.to("openreg") for t in (q, k, v)), is_causal=True)
    assert choice == {FLASH: SDPBackend.FLASH_ATTENTION, EFFICIENT: SDPBackend.EFFICIENT_ATTENTION,
                      MATH: SDPBackend.MATH}[path].value
    assert _took(ops, path)
    with sdpa_kernel(SDPBackend.MATH if path == MATH else SDPBackend.FLASH_ATTENTION):  # CPU's same algorithm
        want = _attend(q, k, v, "causal", "cpu")[1]
    torch.testing.assert_close(got.cpu(), want)


def test_a_priority_order_is_followed_as_on_cuda():
    q, k, v = (t.to("openreg") for t in _inputs("bhld", torch.bfloat16))
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION], set_priority=True):
        _, ops = _ops_of(lambda: F.scaled_dot_product_attention(q, k, v))
    assert _took(ops, EFFICIENT)


def test_no_enabled_kernel_raises_as_on_cuda():
    q, k, v = (t.to("openreg") for t in _inputs("bhld"))
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # float32: CUDA's flash kernel takes none
        assert torch._fused_sdp_choice(q, k, v) == SDPBackend.ERROR.value
        with pytest.raises(RuntimeError, match="^No viable backend for scaled_dot_product_attention was found"):
            F.scaled_dot_product_attention(q, k, v)
    assert torch.equal(torch.ones(2, device="openreg").cpu(), torch.ones(2))  # the device still works


@pytest.mark.parametrize("case", ["dtypes", "dims", "mask dtype", "dropout"])
def test_bad_inputs_raise_at_the_call_with_atens_message(case):
    # The composite's input checks (CUDA's and CPU's) run on openreg too, before any kernel is queued.
    def args(device):
        q = torch.randn(1, 2, 8, 16, device=device)
        if case == "dtypes":
            return (q, q.double(), q), {}
        if case == "dims":
            return (q.flatten(), q.flatten(), q.flatten()), {}
        if case == "mask dtype":
            return (q, q, q), {"attn_mask": torch.ones(8, 8, dtype=torch.int32, device=device)}
        return (q, q, q), {"dropout_p": 2.0}

    with pytest.raises(RuntimeError) as on_cpu:
        a, kw = args("cpu")
        F.scaled_dot_product_attention(*a, **kw)
    with pytest.raises(RuntimeError) as on_openreg:
        a, kw = args("openreg")
        F.scaled_dot_product_attention(*a, **kw)
    assert str(on_openreg.value) == str(on_cpu.value)
    torch.openreg.synchronize()  # nothing failed on the device
    assert torch.equal(torch.ones(2, device="openreg").cpu(), torch.ones(2))


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


def test_compiled_attention_keeps_cudas_flash_kernel_and_matches_eager():
    from torch._inductor.utils import run_and_get_code

    inputs = _inputs("blhd")

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True).float()

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
    assert "_scaled_dot_product_flash_attention.default" in code
    assert "_scaled_dot_product_flash_attention_backward.default" in code
    assert "extern_kernels.bmm" not in code  # not decomposed into the math path
