"""Turning the device arguments users pass (int, str, torch.device, None) into an openreg index."""

from __future__ import annotations

from typing import Any, Union

import torch

from torch_openreg import _C

from ._initialization import _lazy_init

#: What the public functions accept as a device: an index, "openreg:1", torch.device, or None.
Device = Union[int, str, torch.device, None]


def _current_device() -> int:
    _lazy_init()
    return _C._get_device()


def _get_device_index(device: Any, optional: bool = False) -> int:
    """The openreg device index that ``device`` names, like ``torch.cuda._utils._get_device_index``.

    An int is returned as is (the runtime checks its range where it is used). ``"openreg"`` or
    ``torch.device("openreg")`` without an index, and ``None``, mean the current device when
    ``optional`` is True. Another device type raises ValueError; a malformed string raises what
    ``torch.device`` raises (RuntimeError).
    """
    if isinstance(device, bool):  # a bool is an int to Python, never a meaningful device
        raise ValueError(f"Expected an openreg device index, but got: {device!r}")
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "openreg":
            raise ValueError(f"Expected an openreg device, but got: {device}")
        if device.index is not None:
            return device.index
        if optional:
            return _current_device()
        raise ValueError(f"Expected a torch.device with a specified index or an integer, but got: {device}")
    # The `device` context manager also names a device (torch.cuda accepts its own the same way).
    from ._device import device as device_context

    if isinstance(device, device_context):
        return device.idx
    if device is None and optional:
        return _current_device()
    raise ValueError(f"Expected an openreg device (int, str or torch.device), but got: {device!r}")
