"""Copies of lazily conjugated and negated tensors (conj/neg bits) into, out of and between openreg devices.

The copy resolves the bits itself; before it did, the Conjugate and Negative fallbacks cloned the source
to resolve it, the clone was another copy, and the stack overflowed (Note [Copies see conj and neg bits]
in backend/ops/Copy.cpp).
"""

import pytest
import torch

COMPLEX = [torch.complex64, torch.complex128]

LAZY_VIEWS = {
    "conj": torch.conj,
    "neg": torch._neg_view,
    "conj_neg": lambda t: torch._neg_view(t.conj()),
}


def sample(dtype, shape=(5, 7)):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(shape, dtype=dtype, generator=gen)


def lazy_view_params():
    return pytest.mark.parametrize("view", LAZY_VIEWS.values(), ids=LAZY_VIEWS.keys())


@pytest.mark.parametrize("dtype", COMPLEX)
@lazy_view_params()
def test_host_to_device_resolves_the_bits(dtype, view):
    x = sample(dtype)
    expected = view(x).resolve_conj().resolve_neg()
    dev = view(x).to("openreg")
    assert torch.equal(dev.cpu().resolve_conj().resolve_neg(), expected)
    into = torch.empty(5, 7, dtype=dtype, device="openreg")
    into.copy_(view(x))
    assert not into.is_conj() and not into.is_neg()
    assert torch.equal(into.cpu(), expected)
    strided = torch.empty(7, 5, dtype=dtype, device="openreg").t()
    strided.copy_(view(x))
    assert torch.equal(strided.cpu(), expected)


@pytest.mark.parametrize("dtype", COMPLEX)
@lazy_view_params()
def test_device_to_host_resolves_the_bits(dtype, view):
    x = sample(dtype)
    expected = view(x).resolve_conj().resolve_neg()
    dev = x.to("openreg")
    assert torch.equal(view(dev).cpu().resolve_conj().resolve_neg(), expected)
    into = torch.empty(5, 7, dtype=dtype)
    into.copy_(view(dev))
    assert torch.equal(into, expected)
    assert torch.equal(view(dev).resolve_conj().resolve_neg().cpu(), expected)
    pinned = torch.empty(5, 7, dtype=dtype, pin_memory=True)
    pinned.copy_(view(dev), non_blocking=True)
    torch.openreg.synchronize()
    assert torch.equal(pinned, expected)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("target", ["openreg:0", "openreg:1"], ids=["same_device", "peer"])
@lazy_view_params()
def test_device_to_device_resolves_the_bits(dtype, target, view):
    x = sample(dtype)
    expected = view(x).resolve_conj().resolve_neg()
    dev = x.to("openreg:0")
    into = torch.empty(5, 7, dtype=dtype, device=target)
    into.copy_(view(dev))
    assert torch.equal(into.cpu(), expected)
    widened = torch.empty(5, 7, dtype=torch.complex128, device=target)
    widened.copy_(view(dev))
    assert torch.equal(widened.cpu(), expected.to(torch.complex128))


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("source", ["cpu", "openreg:0", "openreg:1"])
@lazy_view_params()
def test_copy_into_a_lazy_view_matches_cpu(dtype, source, view):
    x, y = sample(dtype), sample(dtype, (7,)).expand(5, 7)
    expected = x.clone()
    view(expected).copy_(y)
    dev = x.to("openreg")
    view(dev).copy_(y.to(source))
    assert torch.equal(dev.cpu(), expected)


@pytest.mark.parametrize("dtype", COMPLEX)
@lazy_view_params()
def test_copy_from_device_into_a_lazy_host_view_matches_cpu(dtype, view):
    x, y = sample(dtype), sample(dtype, (7, 5)).t()
    expected = x.clone()
    view(expected).copy_(y)
    host = x.clone()
    view(host).copy_(y.to("openreg"))
    assert torch.equal(host, expected)


@lazy_view_params()
def test_item_of_a_lazy_view(view):
    x = torch.tensor(1.5 - 2.5j, dtype=torch.complex128)
    assert view(x.to("openreg")).item() == view(x).item()


def test_negated_real_tensors_round_trip():
    x = torch.arange(12.0).view(3, 4)
    assert torch.equal(torch._neg_view(x).to("openreg").cpu(), -x)
    assert torch.equal(torch._neg_view(x.to("openreg")).cpu(), -x)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_copy_from_and_resize_resolves_the_bits(dtype):
    x = sample(dtype)
    dst = torch.empty(0, dtype=dtype, device="openreg")
    torch._copy_from_and_resize(x.to("openreg").conj(), dst)
    assert torch.equal(dst.cpu(), x.conj().resolve_conj())


@pytest.mark.parametrize(
    "op",
    [
        lambda t: torch.fft.fft(t),
        lambda t: torch.polar(t.abs(), t.angle()),
        lambda t: (t.conj() * t).real,
        lambda t: t.conj().transpose(0, 1).contiguous(),
    ],
    ids=["fft", "polar", "conj_mul", "conj_transpose_contiguous"],
)
def test_complex_ops_that_copy_conjugates(op):
    x = sample(torch.complex64, (4, 4))
    got = op(x.to("openreg")).cpu()
    expected = op(x)
    torch.testing.assert_close(got.resolve_conj().resolve_neg(), expected.resolve_conj().resolve_neg())
