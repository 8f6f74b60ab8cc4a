"""openreg tensors as zero-copy CPU views that gloo can read and write (Note [openreg collectives over
gloo] in _group.py)."""

from __future__ import annotations

import ctypes

import torch

from ._device import BACKEND_NAME


def _cpu_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the same bytes as the openreg tensor ``t`` (no copy).

    The view does not own the memory: whoever uses it keeps ``t`` alive (the queued job does).
    """
    storage = t.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
    raw = (ctypes.c_char * nbytes).from_address(storage.data_ptr())
    flat = torch.frombuffer(raw, dtype=torch.uint8)
    if t.element_size() != 1 and nbytes % t.element_size() != 0:
        raise RuntimeError("openreg distributed: storage size is not a multiple of the element size")
    return flat.view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())


class _Converter:
    """Maps one collective's arguments to CPU views; remembers the openreg device and the originals.

    It refuses, at the call, what gloo cannot be handed: tensors on two openreg devices, on a device
    other than openreg or the CPU, and non-contiguous openreg tensors (as NCCL does).
    """

    def __init__(self, op: str) -> None:
        self.op = op
        self.device: torch.device | None = None
        self.keep: list[torch.Tensor] = []

    def map(self, obj):
        if isinstance(obj, torch.Tensor):
            if obj.device.type == BACKEND_NAME:
                if self.device is None:
                    self.device = obj.device
                elif obj.device != self.device:
                    raise ValueError(
                        f"openreg distributed {self.op}: tensors on different devices "
                        f"({self.device} and {obj.device}); a collective runs on one device"
                    )
                if not obj.is_contiguous():
                    # As NCCL: gloo would treat the view's bytes as dense, a silent wrong result.
                    raise ValueError(f"openreg distributed {self.op}: Tensors must be contiguous")
                self.keep.append(obj)
                return _cpu_view(obj)
            if obj.device.type != "cpu":
                raise ValueError(
                    f"openreg distributed {self.op}: tensors on device {obj.device} are not supported "
                    f"(expected openreg or cpu tensors)"
                )
            return obj
        if isinstance(obj, list):
            return [self.map(o) for o in obj]
        if isinstance(obj, tuple):
            return tuple(self.map(o) for o in obj)
        return obj
