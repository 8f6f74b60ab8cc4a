"""Normalization layers on openreg give CPU's values for every layout and dtype.

Two bugs made them differ silently: PyTorch picks an op's CompositeExplicitAutograd decomposition for a
PrivateUse1 tensor over the backend's fallback, so native_layer_norm, native_group_norm and addr ran as
other ops (rounding differently in float16/bfloat16), and layer norm's decomposition reached training
batch norm's out= kernel, which CPU computes wrongly for inputs that are neither contiguous nor
channels-last (kFunctionalKernel and kOutKernelDiffers in backend/engine/OpPolicy.cpp).
"""

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

LAYOUTS = {
    "transposed": lambda t: t.t(),  # (10, 6)
    "sliced": lambda t: t[:, 1::2],  # (6, 5), storage offset 1
    "unsqueezed_transposed": lambda t: t.t().unsqueeze(0),  # (1, 10, 6)
}
BASE = torch.randn(6, 10, generator=torch.Generator().manual_seed(0))  # leaves the global seed alone


def _pair(layout, requires_grad=False):
    """The same non-contiguous view of the same values on the CPU and on openreg."""
    cpu_base = BASE.clone().requires_grad_(requires_grad)
    dev_base = BASE.to("openreg").requires_grad_(requires_grad)
    return cpu_base, dev_base, LAYOUTS[layout](cpu_base), LAYOUTS[layout](dev_base)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layer_norm_of_a_non_contiguous_input_matches_cpu(layout):
    cpu_base, dev_base, x, y = _pair(layout, requires_grad=True)
    assert not y.is_contiguous()
    n = x.shape[-1]
    weight = torch.randn(n)
    want = F.layer_norm(x, (n,), weight)
    got = F.layer_norm(y, (n,), weight.to("openreg"))
    torch.testing.assert_close(got.cpu(), want)
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad.to("openreg"))
    torch.testing.assert_close(dev_base.grad.cpu(), cpu_base.grad)


@pytest.mark.parametrize("layout", ["transposed", "unsqueezed_transposed"])
def test_training_batch_norm_of_a_non_contiguous_input_matches_cpu(layout):
    cpu_base, dev_base, x, y = _pair(layout, requires_grad=True)
    channels = x.shape[1]
    stats = {d: (torch.zeros(channels, device=d), torch.ones(channels, device=d)) for d in ("cpu", "openreg")}
    want = F.batch_norm(x, *stats["cpu"], training=True)
    got = F.batch_norm(y, *stats["openreg"], training=True)
    torch.testing.assert_close(got.cpu(), want)
    for mine, cpus in zip(stats["openreg"], stats["cpu"]):  # the running statistics' updates
        torch.testing.assert_close(mine.cpu(), cpus)
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(dev_base.grad.cpu(), cpu_base.grad)


def test_batch_norm_saved_statistics_of_a_channels_first_view_match_cpu():
    x = torch.randn(2, 3, 4, 5).transpose(2, 3)  # neither contiguous nor channels-last
    want = torch.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)
    got = torch.native_batch_norm(x.to("openreg"), None, None, None, None, True, 0.1, 1e-5)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_precision_norms_and_addr_match_cpu(dtype):
    torch.manual_seed(1)
    x = torch.randn(4, 8, 16, dtype=dtype)
    w = torch.randn(16, dtype=dtype)
    d = "openreg"
    torch.testing.assert_close(F.layer_norm(x.to(d), (16,), w.to(d)).cpu(), F.layer_norm(x, (16,), w))
    torch.testing.assert_close(F.group_norm(x.to(d), 2).cpu(), F.group_norm(x, 2))
    m, a, b = torch.randn(5, 7, dtype=dtype), torch.randn(5, dtype=dtype), torch.randn(7, dtype=dtype)
    torch.testing.assert_close(torch.addr(m.to(d), a.to(d), b.to(d), beta=0.5, alpha=2).cpu(),
                               torch.addr(m, a, b, beta=0.5, alpha=2))
    out = torch.empty(5, 7, dtype=dtype, device=d)
    torch.addr(m.to(d), a.to(d), b.to(d), out=out)
    torch.testing.assert_close(out.cpu(), torch.addr(m, a, b))


def test_layer_norm_is_one_kernel_on_the_device():
    x = torch.randn(8, 32, device="openreg")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        F.layer_norm(x, (32,))
        torch.openreg.synchronize()
    names = {e.name for e in prof.events()}
    assert "aten::native_layer_norm" in names and "aten::native_batch_norm" not in names
