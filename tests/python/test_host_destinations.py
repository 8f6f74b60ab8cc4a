"""Device-to-host results in recycled host memory (Note [Recycled host destinations] in
backend/memory/HostDestinations.cpp): the results are ordinary CPU tensors, equal to what PyTorch's own
_to_copy gives, and their large blocks come back for the next result."""

import pickle

import pytest
import torch
import torch_openreg._C as C

MIB = 1 << 20


@pytest.fixture(autouse=True)
def _empty_host_cache():
    torch.openreg.empty_cache()
    yield
    torch.openreg.empty_cache()


def _reference(t):
    """A CPU copy of t with t's strides, made without _to_copy."""
    host = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype)
    host.copy_(t)
    return host


def test_large_result_returns_its_block_and_the_next_reuses_it():
    x = torch.randn(4 * MIB // 4, device="openreg")
    first = x.cpu()
    address = first.data_ptr()
    assert C._host_destination_cached_bytes() == 0
    del first
    assert C._host_destination_cached_bytes() >= 4 * MIB
    second = x.cpu()
    assert second.data_ptr() == address
    assert C._host_destination_cached_bytes() == 0
    assert torch.equal(second, _reference(x))


def test_empty_cache_returns_held_blocks():
    x = torch.randn(2 * MIB, device="openreg")
    results = [x.cpu() for _ in range(3)]
    del results
    assert C._host_destination_cached_bytes() >= 3 * 8 * MIB
    torch.openreg.empty_cache()
    assert C._host_destination_cached_bytes() == 0


def _values(*shape, device):
    return torch.arange(torch.Size(shape).numel(), dtype=torch.float32, device=device).reshape(shape) / 7


@pytest.mark.parametrize(
    "make",
    [
        lambda d: _values(1024, 1024, device=d),
        lambda d: _values(1024, 1024, device=d).t(),  # dense, transposed strides
        lambda d: _values(8, 64, 64, 64, device=d).to(memory_format=torch.channels_last),
        lambda d: _values(2048, 1024, device=d)[::2],  # not dense: PyTorch's path
        lambda d: _values(16, device=d),  # small: the CPU allocator
    ],
)
def test_results_match_cpu_values_and_strides(make):
    """openreg -> CPU gives what the same conversion of the same CPU tensor gives."""
    x, same_on_cpu = make("openreg"), make("cpu")
    for kw in ({}, {"dtype": torch.float64}, {"dtype": torch.bfloat16}):
        got = x.to("cpu", **kw)
        want = same_on_cpu.to(**kw) if kw else same_on_cpu.clone(memory_format=torch.preserve_format)
        assert got.device.type == "cpu"
        assert got.stride() == want.stride()
        assert got.dtype == want.dtype
        assert torch.equal(got, want)


def test_results_are_ordinary_cpu_tensors():
    x = torch.arange(MIB, dtype=torch.float32, device="openreg")
    host = x.cpu()
    assert not host.is_pinned()
    host.resize_(2 * MIB)  # the storage's allocator serves the growth
    assert torch.equal(host[:MIB], torch.arange(MIB, dtype=torch.float32))
    host.numpy()[0] = 7.0
    assert host[0].item() == 7.0
    assert torch.equal(pickle.loads(pickle.dumps(host)), host)
    shared = x.cpu().share_memory_()
    assert shared.is_shared() and torch.equal(shared, torch.arange(MIB, dtype=torch.float32))


def test_autograd_through_cpu():
    x = torch.randn(MIB, device="openreg", requires_grad=True)
    (x.cpu() * 2).sum().backward()
    assert x.grad.device.type == "openreg"
    assert torch.equal(x.grad.cpu(), torch.full((MIB,), 2.0))


def test_non_blocking_requests_take_pytorch_path():
    x = torch.randn(MIB, device="openreg")
    result = x.to("cpu", non_blocking=True)
    torch.openreg.synchronize()
    assert result.is_pinned()  # as from CUDA: a non-blocking copy to the host lands in pinned memory
    assert torch.equal(result, _reference(x))
    del result
    assert C._host_destination_cached_bytes() == 0  # the pinned result was not ours to recycle


def test_result_freed_on_another_thread_comes_back():
    import threading

    x = torch.randn(MIB, device="openreg")
    box = [x.cpu()]
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    assert C._host_destination_cached_bytes() >= 4 * MIB
