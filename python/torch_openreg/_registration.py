"""Registers openreg with PyTorch: once per process, whichever way the package was imported."""

import atexit
import threading

import torch

_BACKEND_NAME = "openreg"

# Guards `_registered`: two threads importing torch_openreg at once are serialised by Python's import
# lock already, but register() is also reachable from a reload, so it keeps its own state.
_lock = threading.Lock()
_registered = False


def register() -> None:
    """Loads the compiled backend and registers device, module and generated methods (idempotent)."""
    global _registered
    with _lock:
        if _registered:
            return
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", _BACKEND_NAME):
            raise RuntimeError(
                f"torch_openreg: the PrivateUse1 device is already registered as {current!r}; "
                f"only one PrivateUse1 backend can be loaded in a process"
            )
        # The compiled module first: if the build is missing, torch is left untouched. Loading it loads
        # libopenreg_backend, whose static initialisers register the device guard, hooks and allocators.
        try:
            from torch_openreg import _C  # noqa: F401
        except ImportError as err:
            raise ImportError(
                "torch_openreg: the compiled module torch_openreg._C could not be loaded "
                f"({err}); build it with `make build`"
            ) from err
        torch.utils.rename_privateuse1_backend(_BACKEND_NAME)

        from torch_openreg import openreg as device_module

        torch._register_device_module(_BACKEND_NAME, device_module)
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)

        from torch_openreg import _multiprocessing

        _multiprocessing.register_reductions()
        from torch_openreg._dynamo_autoload import register_when_dynamo_loads

        register_when_dynamo_loads()
        from torch_openreg import _distributed

        _distributed.register()
        atexit.register(_drain_devices_at_exit)
        _registered = True


def _drain_devices_at_exit() -> None:
    """Waits for all device work before the interpreter finalizes.

    Work still queued at exit would otherwise run on device threads while Python and the backend's
    static objects (allocators, stream pool) are being torn down: a crash at exit, and lost work. Like a
    CUDA program's implicit teardown, exiting completes the queued work first. Errors of failed work are
    not raised here (nobody is left to handle them), and a forked child never touches the parent's
    devices.
    """
    from torch_openreg import _C

    if not _C._is_initialized() or _C._is_in_bad_fork():
        return
    for index in range(_C._get_device_count()):
        try:
            _C._synchronize(index)
        except Exception:  # noqa: BLE001 - reported by whoever synchronizes next; at exit, nobody
            pass
