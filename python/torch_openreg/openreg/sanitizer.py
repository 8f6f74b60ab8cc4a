"""The stream race checker: ``torch.openreg.sanitizer``.

With ``OPENREG_SANITIZER=1`` in the environment, or :func:`enable` called before the work to check,
every op, copy and fill on openreg tensors is checked against the work other streams did on the same
bytes, with happens-before taken from stream order, events, ``wait_stream`` and host synchronizations
(Note [Stream race checker model] in backend/sanitizer/RaceChecker.h). An unordered conflicting access
raises ``torch.AcceleratorError`` (a ``RuntimeError``; ``error_code`` :data:`RACE_ERROR_CODE`) at the op
that completes the race, naming both ops, their streams, the tensor and the Python stack of each. In
report mode (``OPENREG_SANITIZER=report`` or ``enable(report=True)``) every race is recorded, the
program continues, and at exit a summary is printed and the process exits with status
:data:`RACE_ERROR_CODE`.

Work done before the checker is enabled is not known to it: enable it first. The mode is fixed once.
"""

from __future__ import annotations

from torch_openreg import _C

#: ``error_code`` of the error a race raises, and the exit status of report mode.
RACE_ERROR_CODE = 66

_RAISE, _REPORT = 1, 2


def enable(report: bool = False) -> None:
    """Turns the race checker on for the rest of the process.

    Args:
        report: record every race and report at exit (exit status :data:`RACE_ERROR_CODE`) instead of
            raising at the first one.

    Raises:
        RuntimeError: the checker already runs in the other mode.
    """
    mode = _REPORT if report else _RAISE
    if not _C._sanitizer_enable(mode):
        raise RuntimeError(f"the openreg sanitizer already runs in {'report' if mode == _RAISE else 'raise'} mode")


def is_enabled() -> bool:
    """Whether the race checker is on (from ``OPENREG_SANITIZER`` or :func:`enable`)."""
    return _C._sanitizer_mode() > 0


def races() -> list[str]:
    """The messages of the races found so far (in report mode, every one; in raise mode, those raised)."""
    return list(_C._sanitizer_races())
