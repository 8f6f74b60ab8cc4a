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

Besides eager ops, copies and fills, the checker sees compiled kernels (torch.compile: each kernel's
input buffers are read and its output and mutated buffers written, named by the kernel) and collectives
(torch.distributed on openreg: a collective starts after the work issued on its device's current
stream, reads its inputs and writes its outputs, and whoever uses them afterwards must wait for it:
``Work.wait()``, its future, or a synchronize), and the host's use of pinned memory that a pending
``non_blocking`` copy reads or writes (a CPU op on the pinned tensor before a synchronization that covers
the copy; Note [Host access to pinned memory] in backend/sanitizer/Sanitizer.cpp).

Work done before the checker is enabled is not known to it: enable it first. The mode is fixed once.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from torch_openreg import _C

from ._initialization import _lazy_call, _lazy_init

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
    global on
    mode = _REPORT if report else _RAISE
    _lazy_init()  # OPENREG_SANITIZER is applied when the runtime starts; a malformed value raises here
    if not _C._sanitizer_enable(mode):
        raise RuntimeError(f"the openreg sanitizer already runs in {'report' if mode == _RAISE else 'raise'} mode")
    on = True


def is_enabled() -> bool:
    """Whether the race checker is on (from ``OPENREG_SANITIZER`` or :func:`enable`).

    Starts the runtime, which applies ``OPENREG_SANITIZER`` (a malformed value raises RuntimeError naming it).
    """
    _lazy_init()
    _refresh()
    return on


def races() -> list[str]:
    """The messages of the races found so far (in report mode, every one; in raise mode, those raised)."""
    return list(_C._sanitizer_races())


#: Whether the checker is on: read by the hooks in Python (compiled kernels, collectives), so that they
#: cost one attribute load when it is off. Kept equal to is_enabled(): OPENREG_SANITIZER is applied when
#: the runtime starts (never at import: a malformed value must not break ``import torch``), so it is
#: refreshed right after the start (a queued call) and by enable(). Compiled kernels and collectives need
#: openreg tensors, which exist only after the start.
on: bool = False


def _refresh() -> None:
    global on
    on = _C._sanitizer_mode() > 0


_lazy_call(_refresh)


def _launch(name: str, reads: tuple, writes: tuple) -> None:
    """A compiled kernel's buffers (Inductor's generated wrapper calls this before the kernel)."""
    _C._sanitizer_launch(name, [t for t in reads if isinstance(t, torch.Tensor)],
                         [t for t in writes if isinstance(t, torch.Tensor)])


def _tensors(x: Any, out: list) -> list:
    if isinstance(x, torch.Tensor):
        if x.device.type == "openreg":
            out.append(x)
    elif isinstance(x, (list, tuple)):
        for o in x:
            _tensors(o, out)
    elif isinstance(x, dict):
        for o in x.values():
            _tensors(o, out)
    return out


# Collectives whose first argument is only read (the rest of every collective's arguments are its
# inputs; the first is its output, written, and for in-place ones such as allreduce also its input).
_FIRST_ARG_READ_ONLY = frozenset({"send"})


def _collective(job: Any, calls: Any) -> None:
    """One collective of torch_openreg._distributed: ``job`` is its _Job (its op name, device and end
    event), ``calls`` the gloo calls [(name, args, kwargs)] it runs. Called once per collective, on the
    issuing thread, after the start event was recorded on the current stream."""
    if not on or job.end is None:  # off, or no openreg tensors (CPU tensors, barrier)
        return
    reads: list = []
    writes: list = []
    for name, args, kwargs in calls:
        if args:
            _tensors(args[0], reads if name in _FIRST_ARG_READ_ONLY else writes)
            _tensors(args[1:], reads)
        _tensors(kwargs or {}, reads)
    _C._sanitizer_collective(job.op, job.device.index, job.end, reads, writes)


# Ops that take a tensor without touching its data (besides views, which _HostAccessMode skips by schema).
_NO_DATA_ACCESS = frozenset({
    "aten::empty_like",
    "aten::new_empty",
    "aten::new_empty_strided",
    "aten::is_pinned",
    "aten::_has_compatible_shallow_copy_type",
})


class _HostAccessMode(TorchDispatchMode):
    """Sees this thread's CPU ops while a non_blocking copy may still use pinned memory (Note [Host access to
    pinned memory] in backend/sanitizer/Sanitizer.cpp): each op's CPU tensors, read or written by the
    schema's alias annotations, go to the checker, which keeps those in pinned memory. Ops on openreg
    tensors are device work, checked by the backend's own hooks; view ops touch no data."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func._schema.name
        if not func.is_view and name not in _NO_DATA_ACCESS:
            _host_access(func, args, kwargs)
        return func(*args, **kwargs)


def _cpu_tensors(x: Any, out: list) -> bool:
    """Adds x's CPU tensors to ``out``; False when x holds an openreg tensor (the op is device work)."""
    if isinstance(x, torch.Tensor):
        if x.device.type == "cpu":
            out.append(x)
        elif x.device.type == "openreg":
            return False
    elif isinstance(x, (list, tuple)):
        return all(_cpu_tensors(o, out) for o in x)
    return True


def _host_access(func: Any, args: tuple, kwargs: dict) -> None:
    reads: list = []
    writes: list = []
    for i, arg in enumerate(func._schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        written = arg.alias_info is not None and arg.alias_info.is_write
        if not _cpu_tensors(value, writes if written else reads):
            return
    if reads or writes:
        _C._sanitizer_host_access(func._schema.name, reads, writes)


_watch = threading.local()  # .mode: this thread's pushed _HostAccessMode


def _watch_host_access(watch: bool) -> bool:
    """Pushes (watch) or pops this thread's _HostAccessMode; returns whether it is pushed afterwards. Called
    by the backend at a non_blocking copy's issue and at host synchronizations. A mode pushed above ours
    since (the stack is last in, first out) keeps ours pushed until a later synchronization."""
    mode = getattr(_watch, "mode", None)
    if watch:
        if mode is None:
            mode = _HostAccessMode()
            mode.__enter__()
            _watch.mode = mode
        return True
    if mode is None:
        return False
    current = _get_current_dispatch_mode()
    if current is not None and current is mode:
        current.__exit__(None, None, None)
        _watch.mode = None
        return False
    return True
