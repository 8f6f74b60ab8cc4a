"""Legacy typed storages, as torch.cuda has them: ``torch.openreg.FloatStorage`` and the other
``<Dtype>Storage`` classes. ``Tensor.storage_type()`` looks its class up by name on the device's
module (torch/storage.py), so without them it returned None for openreg tensors. Deprecated in PyTorch
as on CUDA: each use warns as TypedStorage does. Quantized storages are left out, as openreg has no
quantized tensors (and torch.cuda has none either)."""

from __future__ import annotations

from typing import Any

import torch
from torch._utils import classproperty
from torch.storage import _dtype_to_storage_type_map, _LegacyStorage, _warn_typed_storage_removal


class _OpenRegLegacyStorage(_LegacyStorage):
    """Base of the openreg typed storages: what torch.cuda's refuses, refused the same way."""

    @classmethod
    def from_buffer(cls, *args: Any, **kwargs: Any) -> Any:
        _warn_typed_storage_removal()
        raise RuntimeError("from_buffer: Not available for openreg storage")

    @classmethod
    def _new_with_weak_ptr(cls, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("_new_with_weak_ptr: Not available for openreg storage")

    @classmethod
    def _new_shared_filename(cls, manager: Any, obj: Any, size: Any, *, device: Any = None, dtype: Any = None) -> Any:
        raise RuntimeError("_new_shared_filename: Not available for openreg storage")


def _storage_class(name: str, dtype: torch.dtype) -> type:
    def public_dtype(cls: type) -> torch.dtype:
        _warn_typed_storage_removal()
        return dtype

    def private_dtype(cls: type) -> torch.dtype:
        return dtype

    # The module's last part names the device to torch.storage (_get_device_from_module).
    attrs = {
        "dtype": classproperty(public_dtype),
        "_dtype": classproperty(private_dtype),
        "__module__": "torch.openreg",
    }
    return type(name, (_OpenRegLegacyStorage,), attrs)


#: ``FloatStorage``, ``HalfStorage``, ... by name: the non-quantized dtypes of torch.storage's table.
STORAGES: dict[str, type] = {
    name: _storage_class(name, dtype)
    for dtype, name in _dtype_to_storage_type_map().items()
    if not name.startswith("Q")  # QInt8Storage, QUInt8Storage, ...
}
