"""Device selection and properties: which simulated devices exist and which one is current.

The current device is per host thread, as in CUDA.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import torch

from torch_openreg import _C

from ._device_index import Device, _current_device, _DeviceSelector, _get_device_index
from ._initialization import _lazy_init


def device_count() -> int:
    """Number of simulated devices (``OPENREG_DEVICE_COUNT``, default 2); 0 if the runtime cannot start.

    Does not start the runtime.
    """
    return int(_C._get_device_count())


def is_available() -> bool:
    """Whether at least one openreg device can be used. Never raises; does not start the runtime."""
    return device_count() > 0


def current_device() -> int:
    """Index of the calling thread's current openreg device."""
    return _current_device()


def set_device(device: Device) -> None:
    """Makes ``device`` the calling thread's current device; a negative index is a no-op.

    Prefer the :class:`device` context manager, which restores the previous device.
    """
    idx = _get_device_index(device)
    if idx >= 0:
        _lazy_init()
        _C._set_device(idx)


def _exchange_device(idx: int) -> int:
    """Sets the current device and returns the previous one; -1 in, -1 out, nothing changed."""
    if idx < 0:
        return -1
    _lazy_init()
    return int(_C._exchange_device(idx))


def _maybe_exchange_device(idx: int) -> int:
    """Like _exchange_device, for restoring a device saved by it (the runtime is started then)."""
    if idx < 0:
        return -1
    return int(_C._exchange_device(idx))


class device(torch.accelerator.device_index, _DeviceSelector):  # type: ignore[misc]  # idx is never None here
    """Context manager that makes ``device`` current and restores the previous device on exit.

    torch.accelerator.device_index does the exchange; this class adds torch.cuda.device's argument
    types and starts the runtime on entry.

    Args:
        device (torch.device, str or int): the device to select; a negative int or None is a no-op.
    """

    def __init__(self, device: Any):
        super().__init__(_get_device_index(device, optional=True))  # sets idx (torch.cuda.device's attribute)

    def __enter__(self) -> None:
        if self.idx is not None and self.idx >= 0:  # a negative index selects nothing, as in torch.cuda.device
            _lazy_init()
            super().__enter__()

    def __exit__(self, *exc_info: object) -> None:
        if self.idx is not None and self.idx >= 0:
            super().__exit__(*exc_info)


class device_of(device):
    """Context manager that makes the device of ``obj`` (a tensor or storage) current.

    A no-op if ``obj`` is not on an openreg device.
    """

    def __init__(self, obj: Any):
        idx = obj.get_device() if obj.device.type == "openreg" else -1
        super().__init__(idx)


def synchronize(device: Device = None) -> None:
    """Waits for all work on all streams of ``device`` (default: the current device) to finish.

    Raises the error of a failed work item, if one failed since the last synchronization.
    """
    _lazy_init()
    _C._synchronize(_get_device_index(device, optional=True))


# Note [Simulated device properties]
# torch.cuda's property names, with the values of the simulated device. Those the simulation does not
# model are fixed and chosen so that code that reads them does not pick a GPU-specific path:
#  * capability 1.0 (architecture "sim_10"): no CUDA architecture, so no check written for real GPUs
#    (e.g. ">= (8, 0)" for bf16/TF32 tensor cores) passes by accident;
#  * warp_size 1 and max_threads_per_multi_processor 1: a compute thread runs a kernel serially;
#  * L2 cache, shared memory, clocks and bus width 0: not simulated;
#  * is_integrated 0: device memory is a separate heap reached only by copies, as on a discrete GPU;
#  * uuid: a UUID derived from the device index, the same in every process and run.
_CAPABILITY = (1, 0)
_ARCH = "sim_10"
_UUID_NAMESPACE = uuid.UUID("6f70656e-7265-6700-0000-000000000000")


@dataclass(frozen=True)
class _OpenRegDeviceProperties:
    """What ``get_device_properties`` returns: torch.cuda's fields (see Note [Simulated device
    properties]) plus openreg's ``copy_bandwidth``."""

    name: str
    major: int
    minor: int
    #: Memory capacity in bytes (``OPENREG_MEMORY_CAPACITY``).
    total_memory: int
    #: Compute threads of the device's task arena (``OPENREG_COMPUTE_THREADS``).
    multi_processor_count: int
    is_integrated: int
    is_multi_gpu_board: int
    max_threads_per_multi_processor: int
    gcnArchName: str
    warp_size: int
    uuid: str
    L2_cache_size: int
    clock_rate: int
    memory_clock_rate: int
    memory_bus_width: int
    shared_memory_per_block: int
    shared_memory_per_multiprocessor: int
    #: Bytes/s of each copy engine; 0 means unlimited (``OPENREG_COPY_BANDWIDTH``).
    copy_bandwidth: int

    def __repr__(self) -> str:
        return (
            f"_OpenRegDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}, "
            f"L2_cache_size={self.L2_cache_size // (1024 * 1024)}MB, copy_bandwidth={self.copy_bandwidth})"
        )


def get_device_properties(device: Device = None) -> _OpenRegDeviceProperties:
    """Properties of ``device`` (default: the current device), with torch.cuda's field names."""
    _lazy_init()
    idx = _get_device_index(device, optional=True)
    props = _C._get_device_properties(idx)
    return _OpenRegDeviceProperties(
        name=str(props["name"]),
        major=_CAPABILITY[0],
        minor=_CAPABILITY[1],
        total_memory=int(props["total_memory"]),
        multi_processor_count=int(props["multi_processor_count"]),
        is_integrated=0,
        is_multi_gpu_board=0,
        max_threads_per_multi_processor=1,
        gcnArchName="",
        warp_size=1,
        uuid=str(uuid.uuid5(_UUID_NAMESPACE, f"openreg:{idx}")),
        L2_cache_size=int(props.get("l2_cache_size", 0)),
        clock_rate=0,
        memory_clock_rate=0,
        memory_bus_width=0,
        shared_memory_per_block=0,
        shared_memory_per_multiprocessor=0,
        copy_bandwidth=int(props["copy_bandwidth"]),
    )


def get_device_name(device: Device = None) -> str:
    """Name of ``device`` (default: the current device)."""
    return get_device_properties(device).name


def get_device_capability(device: Device = None) -> tuple[int, int]:
    """``(major, minor)`` of ``device`` (default: the current device): ``(1, 0)`` on every device.

    See Note [Simulated device properties].
    """
    props = get_device_properties(device)
    return props.major, props.minor


def can_device_access_peer(device: Device, peer_device: Device) -> bool:
    """Whether ``device`` can reach ``peer_device``'s memory directly: True for two different devices
    (copies between openreg devices go device to device, as over NVLink); False for a device and
    itself, as CUDA answers."""
    _lazy_init()
    idx = _get_device_index(device, optional=True)
    peer = _get_device_index(peer_device)
    if min(idx, peer) < 0:
        _C._check_device_index(min(idx, peer))  # raises torch.AcceleratorError naming the valid range
    return idx != peer


def is_tf32_supported() -> bool:
    """False: openreg's float32 matmuls and convolutions are CPU kernels that always compute in full
    float32, so ``allow_tf32`` settings change nothing on openreg."""
    return False


def get_arch_list() -> list[str]:
    """Architectures this build has kernels for: the simulated one, ``["sim_10"]``."""
    return [_ARCH]


def get_gencode_flags() -> str:
    """``""``: openreg compiles no device code (its kernels are the CPU's), so no gencode flags exist."""
    return ""
