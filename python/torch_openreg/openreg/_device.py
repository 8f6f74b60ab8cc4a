"""Device selection and properties: which simulated devices exist and which one is current.

The current device is per host thread, as in CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch_openreg import _C

from ._device_index import Device, _current_device, _get_device_index
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


class device:
    """Context manager that makes ``device`` current and restores the previous device on exit.

    Args:
        device (torch.device, str or int): the device to select; a negative int or None is a no-op.
    """

    def __init__(self, device: Any):
        self.idx = _get_device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = _exchange_device(self.idx)

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> bool:
        self.idx = _maybe_exchange_device(self.prev_idx)
        return False


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


@dataclass(frozen=True)
class _OpenRegDeviceProperties:
    """What ``get_device_properties`` returns, shaped like ``torch.cuda``'s properties object."""

    name: str
    #: Memory capacity in bytes (``OPENREG_MEMORY_CAPACITY``).
    total_memory: int
    #: Compute threads of the device's task arena (``OPENREG_COMPUTE_THREADS``).
    multi_processor_count: int
    #: Bytes/s of each copy engine; 0 means unlimited (``OPENREG_COPY_BANDWIDTH``).
    copy_bandwidth: int

    def __repr__(self) -> str:
        return (
            f"_OpenRegDeviceProperties(name='{self.name}', total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count}, copy_bandwidth={self.copy_bandwidth})"
        )


def get_device_properties(device: Device = None) -> _OpenRegDeviceProperties:
    """Properties of ``device`` (default: the current device): name, total_memory,
    multi_processor_count, copy_bandwidth."""
    _lazy_init()
    props = _C._get_device_properties(_get_device_index(device, optional=True))
    return _OpenRegDeviceProperties(
        name=str(props["name"]),
        total_memory=int(props["total_memory"]),
        multi_processor_count=int(props["multi_processor_count"]),
        copy_bandwidth=int(props["copy_bandwidth"]),
    )


def get_device_name(device: Device = None) -> str:
    """Name of ``device`` (default: the current device)."""
    return get_device_properties(device).name
