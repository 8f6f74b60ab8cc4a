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

    A non-negative index that names no device raises ``torch.AcceleratorError`` (a RuntimeError, as
    torch.cuda's "invalid device ordinal") giving the valid range; a negative int is returned as is.
    ``"openreg"`` or ``torch.device("openreg")`` without an index, and ``None``, mean the current
    device when ``optional`` is True. Another device type raises ValueError; a malformed string raises
    what ``torch.device`` raises (RuntimeError).
    """
    if isinstance(device, bool):  # a bool is an int to Python, never a meaningful device
        raise ValueError(f"Expected an openreg device index, but got: {device!r}")
    if isinstance(device, int):
        return _checked(device)
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "openreg":
            raise ValueError(f"Expected an openreg device, but got: {device}")
        if device.index is not None:
            return _checked(device.index)
        if optional:
            return _current_device()
        raise ValueError(f"Expected a torch.device with a specified index or an integer, but got: {device}")
    if isinstance(device, _DeviceSelector):
        return device.idx
    if device is None and optional:
        return _current_device()
    raise ValueError(f"Expected an openreg device (int, str or torch.device), but got: {device!r}")
