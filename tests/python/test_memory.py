"""Memory: the caching allocator's statistics through torch.openreg and torch.accelerator."""

import gc

import pytest
import torch

MiB = 1 << 20


def _settle(device=0):
    # Lets queued work finish, and frees what earlier tests left in reference cycles (tensors held by
    # exception tracebacks), so the statistics below do not change when the garbage collector runs.
    gc.collect()
    torch.openreg.synchronize(device)


def test_allocation_is_counted_and_returned():
    _settle()
    before = torch.openreg.memory_allocated(0)
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="openreg:0")
    assert torch.openreg.memory_allocated(0) >= before + 4 * MiB
    assert torch.openreg.memory_reserved(0) >= torch.openreg.memory_allocated(0)
    assert torch.openreg.max_memory_allocated(0) >= before + 4 * MiB
    del x
    _settle()
    assert torch.openreg.memory_allocated(0) == before


def test_devices_are_accounted_separately():
    _settle(0)
    _settle(1)
    before0 = torch.openreg.memory_allocated(0)
    before1 = torch.openreg.memory_allocated(1)
    x = torch.empty(2 * MiB, dtype=torch.uint8, device="openreg:1")
    assert torch.openreg.memory_allocated(1) >= before1 + 2 * MiB
    assert torch.openreg.memory_allocated(0) == before0
    assert torch.openreg.memory_allocated("openreg:1") == torch.openreg.memory_allocated(1)
    with torch.openreg.device(1):
        assert torch.openreg.memory_allocated() == torch.openreg.memory_allocated(1)
    del x


def test_memory_stats_use_cuda_keys_and_agree():
    _settle()  # the three reads below must see one state: a collection between them frees memory
    x = torch.empty(MiB, dtype=torch.uint8, device="openreg")
    stats = torch.openreg.memory_stats()
    for key in (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "reserved_bytes.all.current",
        "reserved_bytes.all.peak",
    ):
        assert key in stats, key
    assert list(stats) == sorted(stats)
    assert stats["allocated_bytes.all.current"] == torch.openreg.memory_allocated()
    assert stats["reserved_bytes.all.current"] == torch.openreg.memory_reserved()
    assert torch.accelerator.memory_allocated(0) == torch.openreg.memory_allocated(0)
    assert torch.accelerator.memory_reserved(0) == torch.openreg.memory_reserved(0)
    assert torch.accelerator.memory_stats(0)["allocated_bytes.all.current"] == stats["allocated_bytes.all.current"]
    del x


def test_reset_peak_memory_stats():
    _settle()
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="openreg")
    del x
    _settle()
    assert torch.openreg.max_memory_allocated() >= 8 * MiB + torch.openreg.memory_allocated()
    torch.openreg.reset_peak_memory_stats()
    assert torch.openreg.max_memory_allocated() == torch.openreg.memory_allocated()
    assert torch.openreg.max_memory_reserved() == torch.openreg.memory_reserved()


def test_reset_accumulated_memory_stats():
    x = torch.empty(MiB, dtype=torch.uint8, device="openreg")
    del x
    _settle()
    assert torch.openreg.memory_stats()["allocation.all.allocated"] > 0
    torch.openreg.reset_accumulated_memory_stats()
    stats = torch.openreg.memory_stats()
    assert stats["allocation.all.allocated"] == 0
    assert stats["allocation.all.freed"] == 0


def test_empty_cache_releases_cached_blocks():
    _settle()
    x = torch.empty(16 * MiB, dtype=torch.uint8, device="openreg")
    del x
    _settle()
    # the freed block stays cached for reuse...
    assert torch.openreg.memory_reserved() >= torch.openreg.memory_allocated() + 16 * MiB
    torch.openreg.empty_cache()
    # ...until the cache is emptied: nothing is reserved beyond what live tensors use
    assert torch.openreg.memory_reserved() - torch.openreg.memory_allocated() < 16 * MiB


def test_cached_block_is_reused():
    _settle()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="openreg")
    reserved = torch.openreg.memory_reserved()
    del x
    _settle()
    y = torch.empty(4 * MiB, dtype=torch.uint8, device="openreg")
    assert torch.openreg.memory_reserved() == reserved
    del y


def test_memory_summary_mentions_the_device():
    summary = torch.openreg.memory_summary(1)
    assert "openreg:1" in summary
    assert "Allocated memory" in summary


def test_mem_get_info_reports_the_capacity():
    free, total = torch.openreg.mem_get_info(1)
    assert total == torch.openreg.get_device_properties(1).total_memory
    assert 0 <= free <= total


@pytest.mark.parametrize("size, error", [(1.5, TypeError), (-0.5, TypeError), (2.0, TypeError), ("8", TypeError),
                                         (-1, ValueError)])
def test_caching_allocator_alloc_refuses_a_size_that_is_not_a_byte_count(size, error):
    # int() made 1.5 one byte and -0.5 a null pointer
    with pytest.raises(error, match="size"):
        torch.openreg.caching_allocator_alloc(size)


def test_memory_functions_taking_counts_refuse_floats():
    p = torch.openreg.caching_allocator_alloc(512)
    with pytest.raises(TypeError, match="mem_ptr"):
        torch.openreg.caching_allocator_delete(float(p))  # int() freed it
    torch.openreg.caching_allocator_delete(p)  # still live: freed here
    with pytest.raises(TypeError, match="max_entries"):
        torch.openreg.memory._record_memory_history(max_entries=10.5)
    torch.openreg.memory._record_memory_history(None)
