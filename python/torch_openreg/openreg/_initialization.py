"""Lazy initialisation of the openreg runtime, as torch.cuda does it.

Nothing starts the runtime at import: the first call that needs a device (a tensor on ``openreg``, a
stream, ``current_device()``...) calls ``_lazy_init()``, which starts it exactly once. Calls that must
not start it (``torch.manual_seed`` at program start) are queued with ``_lazy_call`` and run right after
the start.
"""

from __future__ import annotations

import threading
import traceback
from typing import Callable

from torch._utils import _LazySeedTracker

from torch_openreg import _C

# `_initialized` only turns True, under `_initialization_lock`, after every queued call ran; readers
# outside the lock may see a stale False and then take the lock, which re-checks (double-checked).
_initialized = False
_initialization_lock = threading.Lock()
# Set on the thread that is running the queued calls, which may call back into _lazy_init(): that
# thread must pass through, every other thread must wait on the lock.
_tls = threading.local()
# Queued (callable, stack at the call) pairs, run in order at initialisation.
_queued_calls: list[tuple[Callable[[], None], list[str]]] = []
# Seeding calls replace each other: only the latest `manual_seed`-like and the latest
# `manual_seed_all`-like call matter, run in the order they were made (torch.cuda's tracker).
_lazy_seed_tracker = _LazySeedTracker()


class DeferredOpenRegCallError(Exception):
    """A call queued before initialisation failed when initialisation ran it."""


# Note [A failed deferred call]
# Initialisation runs every queued call, in order, even after one fails: a failure must not drop the
# calls behind it (seeds run after the other queued calls, so a failing set_rng_state dropped an
# earlier manual_seed, and the program ran on unseeded). The failures are then raised together, as
# DeferredOpenRegCallError with each error and the stack of the call that queued it, from the first
# use that started the runtime; the runtime is initialised by then, with every other queued call's
# effect in place. (torch.cuda leaves itself uninitialised and reruns the queue at its next Python
# call, but torch's C++ side already counts the device as initialised once a queued call that asks for
# the current device ran, so tensor operations go on regardless; one rule for all calls is clearer.)


def _is_in_bad_fork() -> bool:
    """Whether this is a child forked after the parent started the openreg runtime."""
    return bool(_C._is_in_bad_fork())


def is_initialized() -> bool:
    """Whether the openreg runtime has been started in this process."""
    return _initialized and not _is_in_bad_fork()


def _lazy_call(callable: Callable[[], None], *, seed: bool = False, seed_all: bool = False) -> None:
    """Runs ``callable`` now if the runtime is started, else right after it starts."""
    with _initialization_lock:
        if is_initialized():
            callable()
            return
        stack = traceback.format_stack()
        if seed_all:
            _lazy_seed_tracker.queue_seed_all(callable, stack)
        elif seed:
            _lazy_seed_tracker.queue_seed(callable, stack)
        else:
            _queued_calls.append((callable, stack))


def init() -> None:
    """Starts the openreg runtime. Does nothing if it is already started."""
    _lazy_init()


def _lazy_init() -> None:
    """Starts the runtime once (thread-safe); raises RuntimeError in a bad fork or on bad OPENREG_* variables,
    and DeferredOpenRegCallError when a queued call failed (Note [A failed deferred call])."""
    global _initialized, _lazy_seed_tracker
    if is_initialized() or getattr(_tls, "is_initializing", False):
        return
    with _initialization_lock:
        if is_initialized():
            return
        if _is_in_bad_fork():
            raise RuntimeError(
                "Cannot re-initialize openreg in forked subprocess. To use openreg with "
                "multiprocessing, you must use the 'spawn' start method"
            )
        # Raises RuntimeError naming the variable for a malformed OPENREG_* setting; we stay
        # uninitialised, so every later call reports the same error instead of half-working.
        _C._init()
        _tls.is_initializing = True
        calls = _queued_calls + [c for c in _lazy_seed_tracker.get_calls() if c is not None]
        _queued_calls.clear()
        _lazy_seed_tracker = _LazySeedTracker()
        failures: list[tuple[Exception, list[str]]] = []
        try:
            for queued_call, stack in calls:
                try:
                    queued_call()
                except Exception as err:  # reported below, after the calls behind it ran
                    failures.append((err, stack))
        finally:
            del _tls.is_initializing
        _initialized = True
        if failures:
            message = "\n\n".join(
                f"openreg call failed lazily at initialization with error: {err}\n\n"
                f"openreg call was originally invoked at:\n\n{''.join(stack)}"
                for err, stack in failures
            )
            raise DeferredOpenRegCallError(message) from failures[0][0]
