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
    return torch.accelerator.current_device_index()


class _DeviceSelector:
    """Base of the ``torch.openreg.device`` context managers: an object that names a device by ``idx``.

    It lives here, not in ``_device``, so that ``_get_device_index`` can accept those objects (as
    torch.cuda accepts its own) without this module importing ``_device``, which imports this one.
    """

    idx: int


def _checked(idx: int) -> int:
    """``idx`` if it is -1 or less (torch.cuda's "no device": a no-op where one is allowed, refused by
    the runtime elsewhere) or names a device; otherwise raises ``torch.AcceleratorError``.

    The whole Python int is checked: the backend's index type is 8 bits, so an unchecked 256 would be
    device 0 and 128 would be -128.
    """
    if idx >= 0:
        _C._check_device_index(idx)
    return idx


def _get_device_index(device: Any, optional: bool = False) -> int:
    """The openreg device index that ``device`` names, like ``torch.cuda._utils._get_device_index``.

    torch.accelerator._get_device_index does the parsing (int, str, torch.device, None; another device
    type raises ValueError, a malformed string what ``torch.device`` raises). Around it, what it leaves
    to the backend: a bool is refused, the ``torch.openreg.device`` context managers are accepted (as
    torch.cuda accepts its own), the current device starts the runtime first, and a non-negative index
    that names no device raises ``torch.AcceleratorError`` (a RuntimeError, as torch.cuda's "invalid
    device ordinal") giving the valid range; a negative int is returned as is.
    """
    if isinstance(device, bool):  # a bool is an int to Python, never a meaningful device
        raise ValueError(f"Expected an openreg device index, but got: {device!r}")
    if isinstance(device, _DeviceSelector):
        return device.idx
    if isinstance(device, str):
        device = torch.device(device)
    if not isinstance(device, (int, torch.device)) and device is not None:
        raise ValueError(f"Expected an openreg device (int, str or torch.device), but got: {device!r}")
    if isinstance(device, torch.device) and device.type != "openreg":
        raise ValueError(f"Expected an openreg device, but got: {device}")
    if device is None or (isinstance(device, torch.device) and device.index is None):
        if not optional:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got: {device}")
        _lazy_init()  # the current device is the runtime's
    return _checked(torch.accelerator._get_device_index(device, optional))
