"""Device memory statistics, the caching allocator's cache and its debugging API, named and shaped as in
torch.cuda.memory.

A freed block stays cached and is reused at once by later allocations on the stream it was allocated
on (CUDA's stream-ordered rules); a tensor used on other streams needs ``Tensor.record_stream`` before
it is freed. ``memory_reserved`` >= ``memory_allocated``; ``empty_cache`` waits for the work that may
still use cached blocks and returns them to the device. Statistics use CUDA's flat keys, e.g.
``"allocated_bytes.all.current"``. Snapshots (``_snapshot``, ``memory_snapshot``) have torch.cuda's
structure, so ``torch.cuda._memory_viz`` renders them.
"""

from __future__ import annotations

import contextlib
import operator
import pickle
import sys
from collections.abc import Iterator
from typing import Any, Optional

import torch

from torch_openreg import _C

from ._device_index import Device, _get_device_index
from ._initialization import _lazy_init, is_initialized

__all__ = [
    "memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "empty_cache",
    "memory_summary",
    "mem_get_info",
    "memory_snapshot",
    "set_per_process_memory_fraction",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "MemPool",
    "use_mem_pool",
]


def _index(device: Device) -> int:
    _lazy_init()
    return _get_device_index(device, optional=True)


# Statistics, peaks, the cache and mem_get_info go through torch.accelerator.memory_*, which reaches
# the allocator registered for the openreg device type (c10::DeviceAllocator); only what
# torch.accelerator lacks has bindings of its own here: the per-process memory fraction, raw
# caching_allocator_alloc/delete, history recording, snapshots and the summary table.


def memory_stats(device: Device = None) -> dict[str, Any]:
    """The caching allocator's statistics for ``device``, sorted by key (CUDA's key names)."""
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device: Device = None) -> int:
    """Bytes of device memory held by tensors on ``device`` now."""
    return int(torch.accelerator.memory_allocated(_index(device)))


def max_memory_allocated(device: Device = None) -> int:
    """Peak of ``memory_allocated`` since start or the last ``reset_peak_memory_stats``."""
    return int(torch.accelerator.max_memory_allocated(_index(device)))


def memory_reserved(device: Device = None) -> int:
    """Bytes the caching allocator holds on ``device`` now (allocated plus cached)."""
    return int(torch.accelerator.memory_reserved(_index(device)))


def max_memory_reserved(device: Device = None) -> int:
    """Peak of ``memory_reserved`` since start or the last ``reset_peak_memory_stats``."""
    return int(torch.accelerator.max_memory_reserved(_index(device)))


def reset_peak_memory_stats(device: Device = None) -> None:
    """Resets the peak ("*.peak") statistics of ``device`` to their current values."""
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Device = None) -> None:
    """Resets the accumulated statistics of ``device`` (allocation counts, "*.allocated", "*.freed")."""
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def mem_get_info(device: Device = None) -> tuple[int, int]:
    """(free, total) bytes of ``device``, as ``torch.cuda.mem_get_info``; total is its capacity."""
    free, total = torch.accelerator.get_memory_info(_index(device))
    return int(free), int(total)


def empty_cache() -> None:
    """Returns every unused cached block to its device. Does nothing before the runtime starts."""
    if is_initialized():
        torch.accelerator.empty_cache()


def set_per_process_memory_fraction(fraction: float, device: Device = None) -> None:
    """Caps the memory the caching allocator may reserve on ``device`` at ``fraction`` of its capacity;
    allocating past it raises ``torch.OutOfMemoryError``, as on CUDA."""
    idx = _index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    _C._set_memory_fraction(fraction, idx)


def _count(value: Any, what: str) -> int:
    """``value`` as a non-negative int: a float or another non-integral object raises TypeError (as
    torch.cuda's integer arguments do; ``int()`` truncated 1.5 to 1 and -0.5 to 0), a negative value
    ValueError."""
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, but got {type(value).__name__}: {value!r}") from None
    if n < 0:
        raise ValueError(f"{what} must not be negative, but got {n}")
    return n


def caching_allocator_alloc(size: int, device: Device = None, stream: Optional[torch.Stream] = None) -> int:
    """Allocates ``size`` bytes from the caching allocator for ``stream`` (default: the current stream
    of ``device``) and returns the address; free it with ``caching_allocator_delete``. A size that is
    not an integer raises TypeError, a negative one ValueError."""
    size = _count(size, "caching_allocator_alloc: size")
    if isinstance(device, torch.Stream) and stream is None:  # torch.cuda accepts (size, stream)
        device, stream = None, device
    if stream is None:
        idx = _index(device)
        from .streams import current_stream

        stream = current_stream(idx)
    if not isinstance(stream, torch.Stream):
        raise TypeError("Invalid type for stream argument, must be `torch.Stream`")
    if device is None:
        idx = _index(stream.device_index)
    else:
        idx = _index(device)
        if stream.device_index != idx:
            raise ValueError(f"stream is on openreg:{stream.device_index}, not on openreg:{idx}")
    return int(_C._caching_allocator_alloc(size, idx, stream.stream_id))


def caching_allocator_delete(mem_ptr: int) -> None:
    """Frees memory returned by ``caching_allocator_alloc``; it returns to its stream's cache. An
    address that is not an integer raises TypeError; one it did not hand out, RuntimeError."""
    _C._caching_allocator_delete(_count(mem_ptr, "caching_allocator_delete: mem_ptr"))


def _record_memory_history(
    enabled: Optional[str] = "all",
    context: Optional[str] = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: Device = None,
    clear_history: bool = False,
) -> None:
    """Records allocator events and the stacks that caused them, as ``torch.cuda.memory._record_memory_history``.

    ``enabled``: None stops recording, "state" keeps stacks of live blocks, "all" also keeps a history of
    alloc/free calls (at most ``max_entries``). ``context``: None, "state", "alloc" or "all" (stacks of
    frees too). ``stacks``: "python" or "all" (with C++ frames). History is recorded for every device.
    """
    if isinstance(enabled, bool):  # the legacy signature: _record_memory_history(True, ...)
        enabled = "all" if enabled else None
    max_entries = _count(max_entries, "_record_memory_history: max_entries")
    _lazy_init()
    _C._record_memory_history(enabled, context, stacks, min(max_entries, sys.maxsize), bool(clear_history))


def _snapshot(device: Device = None) -> dict[str, Any]:
    """The allocator's state and recorded history with torch.cuda.memory._snapshot()'s structure:
    ``{"segments": [...], "device_traces": [[...] per device], "allocator_settings": {...}}``."""
    _lazy_init()
    return _C._memory_snapshot()


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickles ``_snapshot()`` into ``filename``; ``torch.openreg.viz.memory_html`` / ``memory_png`` (or
    ``python -m torch_openreg.viz memory``) draw it offline."""
    from ._trace import write_file  # the one safe writer of openreg's files (Note [Writing the trace file])

    write_file(filename, pickle.dumps(_snapshot()), "torch.openreg.memory._dump_snapshot")


def memory_snapshot() -> list[dict[str, Any]]:
    """The segments of every device, as ``torch.cuda.memory_snapshot``."""
    return _snapshot()["segments"]


def memory_summary(device: Device = None, abbreviated: bool = False) -> str:
    """A human-readable table of ``device``'s allocator statistics in ``torch.cuda.memory_summary``'s
    layout (current, peak, total allocated and total freed; per pool unless ``abbreviated``)."""
    idx = _index(device)
    stats = memory_stats(idx)

    def fmt_bytes(n: int) -> str:
        return _C._format_bytes(max(int(n), 0))  # the sim's formatter (openreg/sim/error.h)

    def fmt_count(n: int) -> str:
        return str(int(n))

    rows = [
        ("allocated_bytes", "Allocated memory", fmt_bytes),
        ("active_bytes", "Active memory", fmt_bytes),
        ("requested_bytes", "Requested memory", fmt_bytes),
        ("reserved_bytes", "Reserved memory", fmt_bytes),
        ("inactive_split_bytes", "Non-releasable memory", fmt_bytes),
        ("allocation", "Allocations", fmt_count),
        ("active", "Active allocs", fmt_count),
        ("segment", "Reserved segments", fmt_count),
        ("inactive_split", "Non-releasable allocs", fmt_count),
    ]
    pools = [("all", "")] if abbreviated else [("all", ""), ("large_pool", "      from large pool"),
                                                ("small_pool", "      from small pool")]
    width = 75
    line = "|" + "=" * width + "|"
    thin = "|" + "-" * width + "|"
    out = [line, f"|{f'openreg:{idx} memory summary':^{width}}|", thin,
           f"|{'  num_alloc_retries: ' + str(stats.get('num_alloc_retries', 0)):<37}"
           f"{'num_ooms: ' + str(stats.get('num_ooms', 0)):<38}|",
           f"|{'  num_sync_all_streams: ' + str(stats.get('num_sync_all_streams', 0)):<{width}}|", line,
           f"|{'  Metric':<25}|{'Cur Usage':>12}|{'Peak Usage':>12}|{'Tot Alloc':>11}|{'Tot Freed':>11}|", thin]
    for key, title, fmt in rows:
        for pool, label in pools:
            k = f"{key}.{pool}"
            name = title if pool == "all" else label
            out.append(
                f"|{' ' + name:<25}|{fmt(stats.get(k + '.current', 0)):>12}|{fmt(stats.get(k + '.peak', 0)):>12}|"
                f"{fmt(stats.get(k + '.allocated', 0)):>11}|{fmt(stats.get(k + '.freed', 0)):>11}|"
            )
        out.append(thin)
    out[-1] = line
    return "\n".join(out) + "\n"


class MemPool:
    """A private memory pool of the caching allocator, as ``torch.cuda.MemPool``.

    Allocations made inside :func:`use_mem_pool` come from the pool's own segments: blocks freed into it
    are reused only by later allocations routed to it, and its memory leaves the pool only once no one
    uses it (this object, a context, a graph captured into it) and ``empty_cache`` runs. A graph can
    capture into it with ``pool=mempool.id``. ``snapshot()`` lists its segments.

    Args:
        allocator: must be None: openreg has no pluggable allocators.
        use_on_oom (bool): must be False (allocations outside the pool never fall back on it).
    """

    def __init__(self, allocator: Any = None, use_on_oom: bool = False) -> None:
        if allocator is not None:
            raise ValueError("openreg MemPool: custom allocators are not supported (allocator must be None)")
        if use_on_oom:
            raise ValueError("openreg MemPool: use_on_oom is not supported")
        _lazy_init()
        from ._device import current_device
        from .graphs import graph_pool_handle  # MemPool ids and pool handles share one counter

        self._device = current_device()
        self._id: tuple[int, int] = graph_pool_handle()
        _C._mempool_create(self._device, self._id)
        self._released = False

    @property
    def id(self) -> tuple[int, int]:
        """The pool's id, to pass as a graph's ``pool``."""
        return self._id

    @property
    def allocator(self) -> None:
        """openreg's caching allocator (None: no pluggable allocator)."""
        return None

    def use_count(self) -> int:
        """Users of the pool: this object, each active :func:`use_mem_pool` and each graph in it."""
        return int(_C._mempool_use_count(self._device, self._id))

    def snapshot(self) -> list[dict[str, Any]]:
        """The segments of the pool, as ``memory_snapshot()`` lists them."""
        return [s for s in memory_snapshot() if tuple(s["segment_pool_id"]) == self._id]

    def __del__(self) -> None:
        if getattr(self, "_released", True) or sys.is_finalizing():
            return
        self._released = True
        try:
            _C._mempool_release(self._device, self._id)
        except Exception:  # noqa: BLE001  (a finaliser must not raise)
            pass


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: Device = None) -> Iterator[None]:
    """Routes the calling thread's allocations on ``device`` (default: the current device) to ``pool``
    inside the block, as ``torch.cuda.use_mem_pool``."""
    if not isinstance(pool, MemPool):
        raise TypeError(f"use_mem_pool expects a torch.openreg.MemPool, got {type(pool).__name__}")
    index = _index(device)
    _C._mempool_begin_thread(index, pool.id)
    try:
        yield
    finally:
        _C._mempool_end(index, pool.id)
        _C._mempool_release(index, pool.id)
