"""Registers openreg's Dynamo device interface as soon as torch._dynamo's device registry loads.

Importing torch._dynamo costs seconds, so `import torch_openreg` must not do it. Instead an import hook
waits for torch._dynamo.device_interface to finish loading (torch.compile, torch.export, or the user
importing it) and registers openreg right then, before anything can look the device up.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any


def _register_dynamo() -> None:
    from torch_openreg import _compile_cache, _dynamo_interface

    _dynamo_interface.register()
    _compile_cache.tag_compile_caches()  # Note [openreg in torch.compile's cache keys]


def _mark_constants() -> None:
    from torch_openreg import _dynamo_interface

    _dynamo_interface.mark_constants()


def _register_inductor() -> None:
    from torch_openreg import _inductor

    _inductor.register()


# Inductor's registry is filled once its graph lowering module has loaded (it looks backends up when it
# lowers a graph), not from inside torch._dynamo's import, which would be a circular import.
_TARGETS = {
    "torch._dynamo.device_interface": _register_dynamo,
    # The package itself, once its whole __init__ ran (its decorators need the loaded package).
    "torch._dynamo": _mark_constants,
    "torch._inductor.graph": _register_inductor,
}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, on_loaded: Any):
        self._inner = inner
        self._on_loaded = on_loaded

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        self._on_loaded()


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, on_loaded: Any):
        self._name = name
        self._on_loaded = on_loaded

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self._name:
            return None
        # Unhook first: each module loads once, and the inner lookup must not find us again.
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self._on_loaded)
        return spec


def register_when_dynamo_loads() -> None:
    for name, on_loaded in _TARGETS.items():
        if name in sys.modules:
            on_loaded()
        else:
            sys.meta_path.insert(0, _Finder(name, on_loaded))
