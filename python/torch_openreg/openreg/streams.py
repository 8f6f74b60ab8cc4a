"""``torch.openreg.Stream`` / ``Event`` and the current-stream API.

Both are the generic ``torch.Stream`` / ``torch.Event`` (whose methods reach the backend's device guard)
with torch.cuda's constructors and defaults, so code written for ``torch.cuda.Stream`` runs unchanged:
``Stream`` subclasses ``torch.Stream``; ``Event`` builds a plain ``torch.Event`` (see the Note there).
Current streams are per host thread and per device, as in CUDA.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from torch_openreg import _C

from ._device_index import Device, _get_device_index
from ._initialization import _lazy_init

_DEVICE_TYPE = "openreg"
# Every device's default stream has id 0, as in CUDA: the backend passes sim stream ids through
# unchanged and the sim's default stream is 0 (static_assert in backend/runtime/Stream.cpp).
_DEFAULT_STREAM_ID = 0


class Stream(torch.Stream):
    """An in-order queue of work on one openreg device; work on different streams may overlap.

    Args:
        device (torch.device, str or int, optional): the stream's device (default: the current device).
        priority (int, optional): as torch.cuda's: lower numbers are higher priorities, and a value
            outside :meth:`priority_range` maps to the nearest one in it. openreg has two levels: 0
            (normal) and -1 (high; a device's threads run ready work of high-priority streams first).

    Used as a context manager (``with stream:``) it becomes the current stream and its device the
    current device until the block ends.
    """

    def __new__(cls, device: Device = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if "stream_id" in kwargs:  # re-wrapping an existing stream (stream_id, device_index, device_type)
            return super().__new__(cls, priority=priority, **kwargs)
        _lazy_init()
        idx = _get_device_index(device, optional=True)
        return super().__new__(cls, torch.device(_DEVICE_TYPE, idx), priority=priority)

    def __repr__(self) -> str:
        return f"torch.openreg.Stream(device={self.device} stream_id={self.stream_id})"

    @property
    def priority(self) -> int:
        """The stream's priority, within :meth:`priority_range` (0 normal, -1 high)."""
        return int(_C._stream_priority(self.device_index, self.stream_id))

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """``(least, greatest)`` priority, as torch.cuda.Stream's: ``(0, -1)``."""
        return _C._stream_priority_range()

    # Note [Stream methods check their argument]
    # torch.Stream's wait_event, wait_stream and record_event read their argument as a torch.Event or
    # torch.Stream without checking its type (torch/csrc/Stream.cpp), so another object's memory was
    # taken for one: wait_event(<a Stream>) returned having waited for nothing, other objects gave
    # errors such as "Unknown device: 112". torch.cuda.Stream's versions reach the argument's own
    # methods, so a wrong object raises there; these check first and raise a TypeError naming the
    # expected type.
    def wait_event(self, event: torch.Event) -> None:
        """Makes all work submitted to this stream later wait for ``event``'s most recent record."""
        _check_event(event, "wait_event")
        super().wait_event(event)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Makes all work submitted to this stream later wait for the work now submitted to ``stream``."""
        if not isinstance(stream, torch.Stream):
            raise TypeError(f"Stream.wait_stream: expected a torch.Stream, but got {type(stream).__name__}")
        super().wait_stream(stream)

    def record_event(self, event: Optional[torch.Event] = None) -> torch.Event:
        """Records ``event`` (a new one when None) on this stream and returns it."""
        if event is None:
            return super().record_event()
        _check_event(event, "record_event")
        return super().record_event(event)

    @staticmethod
    def _wrap(stream: torch.Stream) -> "Stream":
        if isinstance(stream, Stream):
            return stream
        _check_openreg_stream(stream)
        return Stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)


class ExternalStream(Stream):
    """torch.cuda.ExternalStream's counterpart, refused: openreg streams can only come from openreg.

    A CUDA external stream wraps a ``cudaStream_t`` made by another library. No other library makes
    openreg streams, and a raw pointer cannot be checked safely, so this raises instead of wrapping an
    address that may not be a stream. To rebuild a stream from its id (from ``stream.stream_id``), use
    ``torch.openreg.Stream(stream_id=..., device_index=..., device_type=...)``.
    """

    def __new__(cls, stream_ptr: int, device: Device = None, **kwargs: Any) -> "ExternalStream":
        raise RuntimeError(
            "torch.openreg.ExternalStream is not supported: openreg streams are created only by openreg. "
            "Rebuild an existing stream with torch.openreg.Stream(stream_id=s.stream_id, "
            "device_index=s.device_index, device_type=s.device_type)"
        )


class _EventMeta(type):
    """Makes ``isinstance(e, torch.openreg.Event)`` true for every openreg ``torch.Event``."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == _DEVICE_TYPE


# Note [openreg events are plain torch.Event objects]
# torch.Event.elapsed_time, and torch.Stream.record_event, accept only objects whose type is exactly
# torch.Event (torch/csrc/Event.cpp checks Py_TYPE). A subclass would make timing between our events,
# or between ours and generic ones, fail. So Event() returns a plain torch.Event on openreg; the
# metaclass keeps isinstance checks against torch.openreg.Event working.
class Event(metaclass=_EventMeta):
    """A point in a stream: to wait for from the host or from other streams, or to time work.

    ``torch.openreg.Event(...)`` returns a ``torch.Event`` on openreg (see the Note above), with
    torch.cuda.Event's constructor: ``record(stream=None)`` and ``wait(stream=None)`` use the current
    stream; ``query``, ``synchronize`` and ``elapsed_time`` (milliseconds) are ``torch.Event``'s.

    Args:
        enable_timing (bool, optional): whether ``elapsed_time`` can be used (default False).
        blocking (bool, optional): accepted for torch.cuda compatibility; a host thread waiting on an
            event always blocks on a condition rather than spinning.
        interprocess (bool, optional): must be False; events cannot be shared between processes.

    The event belongs to the device of the first stream that records it; recording it on another device's
    stream raises (torch.Event's rule, as with CUDA events). The sim's Event underneath has no such rule:
    it reports the device of its most recent record.
    """

    # Returns a plain torch.Event (not an instance of this class), as torch.cuda.Event's users expect.
    def __new__(  # type: ignore[misc]
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:
        if interprocess:
            raise ValueError("openreg events cannot be shared between processes (interprocess=True)")
        return torch.Event(torch.device(_DEVICE_TYPE), enable_timing=enable_timing, blocking=blocking)


def _check_event(event: Any, method: str) -> None:
    if not isinstance(event, torch.Event):
        raise TypeError(f"Stream.{method}: expected a torch.Event, but got {type(event).__name__}")


def _check_openreg_stream(stream: Any) -> None:
    if not isinstance(stream, torch.Stream):
        raise TypeError(f"Expected a torch.Stream, but got: {type(stream).__name__}")
    if stream.device.type != _DEVICE_TYPE:
        raise ValueError(f"Expected an openreg stream, but got a stream of device {stream.device}")


def current_stream(device: Device = None) -> Stream:
    """The calling thread's current stream on ``device`` (default: the current device)."""
    _lazy_init()
    if device is None:  # the common case, without parsing a device
        return Stream._wrap(torch.accelerator.current_stream())
    idx = _get_device_index(device, optional=True)
    return Stream._wrap(torch.accelerator.current_stream(torch.device(_DEVICE_TYPE, idx)))


def default_stream(device: Device = None) -> Stream:
    """The default stream of ``device`` (default: the current device)."""
    _lazy_init()
    idx = _get_device_index(device, optional=True)
    # Asking for the current stream also gives the device type as torch.Stream wants it.
    current = torch.accelerator.current_stream(torch.device(_DEVICE_TYPE, idx))
    return Stream(stream_id=_DEFAULT_STREAM_ID, device_index=idx, device_type=current.device_type)


def set_stream(stream: Optional[torch.Stream]) -> None:
    """Makes ``stream`` current on its device and its device current; None is a no-op.

    Prefer the :func:`stream` context manager, which restores the previous stream.
    """
    if stream is None:
        return
    _check_openreg_stream(stream)
    _lazy_init()
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that makes ``stream`` current, and restores the previous streams on exit.

    Inside the block the stream's device is current too. On exit the previous stream of the stream's
    device, the previous current stream and the previous device are restored (as with
    ``torch.cuda.StreamContext``). None is a no-op.
    """

    def __init__(self, stream: Optional[torch.Stream]):
        if stream is not None:
            _check_openreg_stream(stream)
        self.stream = stream
        self.src_prev_stream: Optional[torch.Stream] = None
        self.dst_prev_stream: Optional[torch.Stream] = None

    # Entered once per op in loops that alternate streams, so it asks torch.accelerator directly (the
    # stream exists, so the runtime is up) instead of building torch.openreg.Stream wrappers: that
    # made a `with stream(s):` cost 18 us, more than the op inside it.
    def __enter__(self) -> None:
        if self.stream is None:
            return
        self.src_prev_stream = torch.accelerator.current_stream()
        self.dst_prev_stream = None
        if self.src_prev_stream.device_index != self.stream.device_index:
            self.dst_prev_stream = torch.accelerator.current_stream(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        if self.stream is None:
            return
        if self.dst_prev_stream is not None:
            torch.accelerator.set_stream(self.dst_prev_stream)
        assert self.src_prev_stream is not None  # set by __enter__ whenever self.stream is
        torch.accelerator.set_stream(self.src_prev_stream)


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    """Context manager selecting ``stream`` (see :class:`StreamContext`)."""
    return StreamContext(stream)
