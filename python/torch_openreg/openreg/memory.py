"""Device memory statistics and the caching allocator's cache, named and shaped as in torch.cuda.

Freed blocks stay cached for reuse by the same stream, so ``memory_reserved`` >= ``memory_allocated``;
``empty_cache`` returns the unused cached blocks to the device. Statistics use CUDA's flat keys, e.g.
``"allocated_bytes.all.current"``.
"""

from __future__ import annotations

import collections
from typing import Any

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
]


def _index(device: Device) -> int:
    _lazy_init()
    return _get_device_index(device, optional=True)


def memory_stats(device: Device = None) -> dict[str, Any]:
    """The caching allocator's statistics for ``device``, sorted by key (CUDA's key names)."""
    stats = _C._memory_stats(_index(device))
    return collections.OrderedDict(sorted(stats.items()))


def memory_allocated(device: Device = None) -> int:
    """Bytes of device memory held by tensors on ``device`` now."""
    return int(_C._memory_allocated(_index(device)))


def max_memory_allocated(device: Device = None) -> int:
    """Peak of ``memory_allocated`` since start or the last ``reset_peak_memory_stats``."""
    return int(_C._max_memory_allocated(_index(device)))


def memory_reserved(device: Device = None) -> int:
    """Bytes the caching allocator holds on ``device`` now (allocated plus cached)."""
    return int(_C._memory_reserved(_index(device)))


def max_memory_reserved(device: Device = None) -> int:
    """Peak of ``memory_reserved`` since start or the last ``reset_peak_memory_stats``."""
    return int(_C._max_memory_reserved(_index(device)))


def reset_peak_memory_stats(device: Device = None) -> None:
    """Resets the peak ("*.peak") statistics of ``device`` to their current values."""
    _C._reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Device = None) -> None:
    """Resets the accumulated statistics of ``device`` (allocation counts, "*.allocated", "*.freed")."""
    _C._reset_accumulated_memory_stats(_index(device))


def mem_get_info(device: Device = None) -> tuple[int, int]:
    """(free, total) bytes of ``device``, as ``torch.cuda.mem_get_info``; total is its capacity."""
    free, total = _C._mem_get_info(_index(device))
    return int(free), int(total)


def empty_cache() -> None:
    """Returns every unused cached block to its device. Does nothing before the runtime starts."""
    if is_initialized():
        _C._empty_cache()


def _format_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            return f"{value:.2f} {unit}"
    raise AssertionError("unreachable")


def memory_summary(device: Device = None, abbreviated: bool = False) -> str:
    """A human-readable table of ``device``'s current and peak memory (``abbreviated`` is accepted for
    torch.cuda compatibility)."""
    idx = _index(device)
    stats = memory_stats(idx)
    rows = [
        ("Allocated memory", "allocated_bytes.all", _format_bytes),
        ("Reserved memory", "reserved_bytes.all", _format_bytes),
        ("Active memory", "active_bytes.all", _format_bytes),
        ("Allocations", "allocation.all", str),
    ]
    lines = [f"openreg:{idx} memory summary", f"{'':<18}{'current':>14}{'peak':>14}"]
    for title, key, fmt in rows:
        if f"{key}.current" in stats:
            lines.append(f"{title:<18}{fmt(stats[f'{key}.current']):>14}{fmt(stats[f'{key}.peak']):>14}")
    return "\n".join(lines) + "\n"
