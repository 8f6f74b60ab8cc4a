"""copy_ between views of one storage: CPU and CUDA refuse a destination that partially overlaps its
source, on the host, at the call (TensorIterator's memory-overlap check); a full overlap is a no-op and
views that interleave without sharing an element are copied. openreg must do the same, never copy
silently nor fail only at the next synchronize."""

import pytest
import torch

DEVICE = "openreg"


def cpu_error(fn):
    """The message CPU raises for `fn` run on CPU tensors."""
    with pytest.raises(RuntimeError) as info:
        fn("cpu")
    return str(info.value)


def shifted(device):
    x = torch.arange(6.0, device=device)
    x[1:].copy_(x[:-1])
    return x


def transposed(device):
    m = torch.arange(9.0, device=device).view(3, 3)
    m.copy_(m.t())
    return m


def transposed_other_dtype(device):
    m = torch.arange(16, device=device, dtype=torch.float32).view(4, 4)
    m.view(torch.int32).t().copy_(m)  # a conversion: the kernel copy, not a byte copy
    return m


def shifted_rows(device):
    m = torch.arange(12.0, device=device).view(4, 3)
    m[1:].copy_(m[:-1])
    return m


@pytest.mark.parametrize("program", [shifted, transposed, transposed_other_dtype, shifted_rows])
def test_partial_overlap_raises_cpus_error_at_the_call(program):
    expected = cpu_error(program)
    assert "refer to a single memory location" in expected
    with pytest.raises(RuntimeError) as info:
        program(DEVICE)
    assert str(info.value) == expected
    torch.openreg.synchronize()  # nothing was queued that fails later


def test_a_refused_copy_leaves_the_destination_untouched():
    x = torch.arange(6.0, device=DEVICE)
    with pytest.raises(RuntimeError, match="single memory location"):
        x[1:].copy_(x[:-1])
    torch.openreg.synchronize()
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def full_overlap(device):
    x = torch.arange(6.0, device=device)
    x.copy_(x)
    x[:].copy_(x)
    x[2:4].copy_(x[2:4])
    return x


def interleaved(device):
    x = torch.arange(10.0, device=device)
    x[::2].copy_(x[1::2])  # no element shared: CPU copies
    return x


def broadcast_into_self_row(device):
    m = torch.arange(9.0, device=device).view(3, 3)
    m.copy_(m[0].clone())
    return m


@pytest.mark.parametrize("program", [full_overlap, interleaved, broadcast_into_self_row])
def test_overlaps_cpu_accepts_give_cpus_result(program):
    expected = program("cpu")
    got = program(DEVICE)
    torch.openreg.synchronize()
    assert torch.equal(got.cpu(), expected)
