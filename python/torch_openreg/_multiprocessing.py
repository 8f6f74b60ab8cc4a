"""Sending openreg tensors and storages between processes (``torch.multiprocessing`` queues, pipes).

CUDA shares a tensor's device memory with the receiving process (CUDA IPC). openreg devices are
simulated inside each process, so there is no memory to share: an openreg tensor travels as a copy,
through CPU shared memory (torch's own CPU reduction), and is rebuilt on the device of the same index
in the receiver. Differences from CUDA, also in docs/semantics.md: the receiver gets a copy (in-place changes
are not seen by the other side), and the copy is taken when the tensor is pickled (for a
``multiprocessing.Queue``, by its feeder thread shortly after ``put``).

Without this, torch's reduction tried to share the openreg storage as a CPU one and failed in the
queue's feeder thread, where nobody sees the error, and the receiver waited for ever.
"""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable

import torch
from torch.nn.parameter import Parameter

_DEVICE_TYPE = "openreg"


def _rebuild_tensor(cpu: torch.Tensor, index: int, is_parameter: bool) -> torch.Tensor:
    # Importing torch in the receiver autoloads openreg; the index is checked there as everywhere.
    tensor = cpu.detach().to(torch.device(_DEVICE_TYPE, index)).requires_grad_(cpu.requires_grad)
    if is_parameter:
        return Parameter(tensor, requires_grad=cpu.requires_grad)
    return tensor


def _rebuild_storage(cpu: torch.UntypedStorage, index: int) -> torch.UntypedStorage:
    storage = torch.UntypedStorage(cpu.nbytes(), device=torch.device(_DEVICE_TYPE, index))
    storage.copy_(cpu)
    return storage


def _tensor_reducer(previous: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def reduce(tensor: torch.Tensor) -> Any:
        if tensor.device.type != _DEVICE_TYPE or (tensor.requires_grad and not tensor.is_leaf):
            return previous(tensor)  # torch's reduction: CPU/CUDA tensors, and its refusal of non-leaves
        # A leaf's CPU copy is made a leaf again, so torch's reduction keeps requires_grad.
        cpu = tensor.detach().cpu().requires_grad_(tensor.requires_grad)
        return (_rebuild_tensor, (cpu, tensor.device.index, isinstance(tensor, Parameter)))

    return reduce


def _storage_reducer(previous: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def reduce(storage: torch.UntypedStorage) -> Any:
        if storage.device.type != _DEVICE_TYPE:
            return previous(storage)
        return (_rebuild_storage, (storage.cpu(), storage.device.index))

    return reduce


def register_reductions() -> None:
    """Wraps torch's reductions of Tensor, Parameter and UntypedStorage (registered when torch imports
    torch.multiprocessing, before this runs) so that openreg ones take the path above."""
    import torch.multiprocessing  # noqa: F401  (registers torch's reductions first, if torch did not yet)

    reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]  # CPython's; typeshed lacks it
    for cls in (torch.Tensor, Parameter):
        ForkingPickler.register(cls, _tensor_reducer(reducers[cls]))
    ForkingPickler.register(torch.UntypedStorage, _storage_reducer(reducers[torch.UntypedStorage]))
