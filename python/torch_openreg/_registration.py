"""Registers openreg with PyTorch: once per process, whichever way the package was imported."""

import atexit
import threading

import torch

_BACKEND_NAME = "openreg"

# Guards `_registered`: two threads importing torch_openreg at once are serialised by Python's import
# lock already, but register() is also reachable from a reload, so it keeps its own state.
_lock = threading.Lock()
_registered = False


def _at_exit() -> None:
    from torch_openreg import _C

    _C._settle_autograd_threads()
    _C._drain_at_exit()


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
            from torch_openreg import _C  # noqa: F401  (loading it registers the backend)
        except ImportError as err:
            raise ImportError(
                "torch_openreg: the compiled module torch_openreg._C could not be loaded "
                f"({err}); build it with `make build`"
            ) from err
        torch.utils.rename_privateuse1_backend(_BACKEND_NAME)
        # torch.accelerator.Graph finds graph implementations by the backend's name: registered after
        # the rename (Note [Graphs on openreg] in backend/registration/Graph.cpp).
        _C._register_graph_impl()

        from torch_openreg import openreg as device_module

        torch._register_device_module(_BACKEND_NAME, device_module)
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)

        from torch_openreg import _multiprocessing

        _multiprocessing.register_reductions()
        from torch_openreg._dynamo_autoload import register_when_dynamo_loads

        register_when_dynamo_loads()
        from torch_openreg import _distributed

        _distributed.register()
        # The C++ runtime drains queued work at exit() (Note [Teardown at exit] in
        # sim/src/runtime.cpp); the interpreter finalizes before that, so it drains here first too,
        # after letting the autograd engine's device threads drop what they hold (Note [Autograd
        # device threads at exit] in backend/runtime/Exit.cpp).
        atexit.register(_at_exit)
        _registered = True
