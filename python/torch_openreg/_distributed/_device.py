"""The openreg device as the distributed backend uses it: the device type's name, ``torch.openreg``, and the
two streams the backend makes per device (the communication lane of the timeline, the side stream of
``Work.get_future()``)."""

from __future__ import annotations

import threading
from typing import Any

import torch

BACKEND_NAME = "openreg"  # the c10d backend's name, and the device type it serves


def _om() -> Any:
    """torch.openreg (registered at runtime, so unknown to type checkers)."""
    return torch.openreg  # type: ignore[attr-defined]


def _flatten(x) -> list[torch.Tensor]:
    """The tensors of a collective's argument (a tensor, or nested lists of them), in order."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for o in x for t in _flatten(o)]
    return []


def _stream_args(stream):
    """A torch.Stream as the bindings take it: (stream_id, device_index, device_type)."""
    return stream.stream_id, stream.device_index, stream.device_type


_comm_streams: dict[int, torch.Stream] = {}
_side_streams: dict[int, torch.Stream] = {}
_lock = threading.Lock()


def _stream_of(streams: dict[int, torch.Stream], device: torch.device) -> torch.Stream:
    """``streams``' stream of ``device``, made on first use."""
    with _lock:
        s = streams.get(device.index)
        if s is None:
            s = streams[device.index] = _om().Stream(device)
        return s


def _comm_lane(device: torch.device) -> int:
    """Stream id of the device's communication lane in torch.openreg.trace: a stream that only names
    the lane (collectives run on the communication threads, not on it)."""
    return _stream_of(_comm_streams, device).stream_id


def _side_stream(device: torch.device) -> torch.Stream:
    """The stream on which ``Work.get_future()`` records its future's events (see _work.py)."""
    return _stream_of(_side_streams, device)
