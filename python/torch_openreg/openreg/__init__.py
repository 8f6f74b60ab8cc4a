"""``torch.openreg``: device, stream, event, random and memory API of the openreg devices.

It mirrors ``torch.cuda`` (same names, signatures and semantics) so device-generic code and code written
for CUDA run on openreg. The generic APIs work too: ``torch.Stream``, ``torch.Event``,
``torch.accelerator.*``.
"""

from __future__ import annotations

import torch

from . import _storage, memory, random, sanitizer, streams, timing, viz  # noqa: F401  (torch.openreg.viz)
from ._device import (  # noqa: F401  (the private names mirror torch.cuda's)
    _exchange_device,
    _maybe_exchange_device,
    can_device_access_peer,
    current_device,
    device,
    device_count,
    device_of,
    get_arch_list,
    get_device_capability,
    get_device_name,
    get_device_properties,
    get_gencode_flags,
    is_available,
    is_tf32_supported,
    set_device,
    synchronize,
)
from ._device_index import _get_device_index  # noqa: F401

# torch calls _lazy_init (first use of the device) and _is_in_bad_fork (torch.manual_seed).
from ._initialization import (  # noqa: F401
    DeferredOpenRegCallError,
    _is_in_bad_fork,
    _lazy_call,
    _lazy_init,
    init,
    is_initialized,
)
from ._sync_debug import get_sync_debug_mode, set_sync_debug_mode
from ._trace import trace
from ._utilization import utilization
from .graphs import OpenRegGraph, graph, graph_pool_handle, is_current_stream_capturing, make_graphed_callables
from .memory import (
    MemPool,
    caching_allocator_alloc,
    caching_allocator_delete,
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
    use_mem_pool,
)
from .random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (
    Event,
    ExternalStream,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

#: Each device's default generator, in device order, as ``torch.cuda.default_generators``: empty until
#: the runtime starts, then filled by the call queued below.
default_generators: tuple[torch.Generator, ...] = ()


def _fill_default_generators() -> None:
    global default_generators
    default_generators = tuple(random._generator(i) for i in range(device_count()))


_lazy_call(_fill_default_generators)


def priority_range() -> tuple[int, int]:
    """``(least, greatest)`` stream priority: ``(0, -1)`` (see :meth:`Stream.priority_range`)."""
    return Stream.priority_range()


# Legacy typed storages (torch.cuda.FloatStorage and friends): Tensor.storage_type() finds them here.
globals().update(_storage.STORAGES)


def __getattr__(name: str) -> object:
    # torch's own code reads torch.cuda._initialized (torch.utils.checkpoint saves and restores the
    # device's RNG state around a recomputation only when it is true); computed on each read, since the
    # runtime may start from C++ (the first tensor) without passing through Python.
    if name == "_initialized":
        return is_initialized()
    # The package lives at torch_openreg.openreg but users reach it as torch.openreg: name that one.
    raise AttributeError(f"module 'torch.openreg' has no attribute '{name}'")


#: Raised when a device runs out of memory (the same class as torch.cuda.OutOfMemoryError).
OutOfMemoryError = torch.OutOfMemoryError


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("openreg", dtype=...)`` accepts."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 kernels run on every openreg device (they are CPU kernels)."""
    return True


__all__ = [
    "DeferredOpenRegCallError",
    "MemPool",
    "OpenRegGraph",
    "graph",
    "graph_pool_handle",
    "graphs",
    "is_current_stream_capturing",
    "make_graphed_callables",
    "use_mem_pool",
    "Event",
    "ExternalStream",
    "can_device_access_peer",
    "default_generators",
    "get_arch_list",
    "get_device_capability",
    "get_gencode_flags",
    "is_tf32_supported",
    "priority_range",
    "utilization",
    "timing",
    "OutOfMemoryError",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "get_sync_debug_mode",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "random",
    "sanitizer",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "set_sync_debug_mode",
    "stream",
    "streams",
    "synchronize",
    "trace",
]
