"""Sync debug mode: warn or raise on every operation that makes the host wait for a device.

Same names, values and semantics as ``torch.cuda.set_sync_debug_mode`` / ``get_sync_debug_mode``; what
counts as a synchronizing operation is described in Note [Sync debug mode] (backend/runtime/SyncDebug.h).
"""

from __future__ import annotations

from torch_openreg import _C

from ._initialization import _lazy_init

_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Sets the debug mode for synchronizing operations.

    Args:
        debug_mode (str or int): "default" or 0: neither warn nor raise on synchronizing operations;
            "warn" or 1: a UserWarning for each; "error" or 2: a RuntimeError for each.
    """
    _lazy_init()
    if isinstance(debug_mode, str):
        if debug_mode not in _MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = _MODES[debug_mode]
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    """The current debug mode for synchronizing operations (0, 1 or 2, see ``set_sync_debug_mode``)."""
    _lazy_init()
    return _C._get_sync_debug_mode()
