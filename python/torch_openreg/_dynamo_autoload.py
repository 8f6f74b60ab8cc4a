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

_TARGET = "torch._dynamo.device_interface"


def _register() -> None:
    from torch_openreg import _dynamo_interface

    _dynamo_interface.register()


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader):
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        _register()


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _TARGET:
            return None
        # Unhook first: the registry module loads once, and the inner lookup must not find us again.
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def register_when_dynamo_loads() -> None:
    if _TARGET in sys.modules:
        _register()
    else:
        sys.meta_path.insert(0, _Finder())
