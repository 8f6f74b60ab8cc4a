"""``torch.openreg.sanitizer``: the stream race checker (the counterpart of ``TORCH_CUDA_SANITIZER``).

With the checker on, every op, copy and fill on openreg tensors is checked when it is issued: its reads
and writes of device memory (by storage bytes, from the schema's alias annotations) must be ordered
after every conflicting access on another stream, by stream order, events, ``wait_stream``,
synchronizations or ``record_stream``. A race raises :class:`StreamRaceError` (a ``RuntimeError``)
at the op that completes it, naming both accesses: ops, streams, devices, tensor and byte range, and
the Python stack each op was issued from.

Turn it on with ``OPENREG_SANITIZER=1`` (raise) or ``OPENREG_SANITIZER=report`` (record every race,
continue, print them at exit and exit with status 66), or call :func:`enable` before the program's
first use of the device.
"""

from __future__ import annotations

from torch_openreg import _C

__all__ = ["StreamRaceError", "enable", "is_enabled", "races"]

#: Raised at the op that completes a stream race (a ``RuntimeError`` subclass).
StreamRaceError = _C._StreamRaceError

_MODES = {0: None, 1: "raise", 2: "report"}


def enable(report: bool = False) -> None:
    """Turns the checker on for the rest of the process.

    Call it before the program first uses the device: work issued earlier is not tracked, so races
    with it go unseen. ``report=True`` records every race and continues; at exit the races are
    printed and the process exits with status 66. Raises ``RuntimeError`` if the checker is already on
    in the other mode (``OPENREG_SANITIZER`` or an earlier call decided it).
    """
    if not _C._sanitizer_enable(bool(report)):
        raise RuntimeError(
            f"torch.openreg.sanitizer is already enabled in {_MODES[_C._sanitizer_mode()]!r} mode "
            "(OPENREG_SANITIZER or an earlier enable() call)"
        )


def is_enabled() -> bool:
    """Whether the checker is on."""
    return _C._sanitizer_mode() != 0


def races() -> list[str]:
    """The messages of the races found so far (in report mode, all of them)."""
    return list(_C._sanitizer_races())
