"""c10d's own gloo groups on openreg devices and tensors, as on CUDA.

Note [openreg tensors in c10d's gloo groups]
With CUDA, "gloo" names a group for the CPU and CUDA devices (``Backend.backend_capability``):
``init_process_group("gloo", device_id=cuda:N)`` binds the device, and a collective on cuda tensors
runs in gloo through host copies. openreg does the same:
- gloo is registered for the openreg device, so ``"gloo"``, ``"cpu:gloo,openreg:gloo"`` and
  ``new_group(backend="gloo")`` make one gloo backend that serves openreg tensors too, and
  ``device_id=openreg:N`` (or N) binds the device: eager connection, ``new_group`` and
  ``split_group`` on it as with CUDA;
- torch's openreg (PrivateUse1) kernels of c10d's collective ops hand the tensors to the group's
  backend for the device, which gloo refuses for a device it does not know. They are replaced by one
  kernel that makes the host wait for the current stream of the tensors' devices, hands gloo zero-copy
  CPU views of the openreg tensors (_views.py) and runs the op's CPU kernel, i.e. the same gloo
  backend. CUDA's gloo path makes a side stream wait instead, and its ``Work.wait()`` makes the
  current stream wait where ours blocks the host until gloo is done: the same orders, less overlap.
  The tensors stay alive until gloo's Work ends (the views do not own the memory; ``_hold``).
openreg's own backend (``ProcessGroupOpenReg``, a Python group) never reaches these kernels: c10d
calls its methods, which keep the streams' order without blocking the host
(Note [Stream-ordered collectives] in _comm_queue.py).
"""

from __future__ import annotations

import threading
import warnings

import torch
import torch.distributed as dist

from ._device import BACKEND_NAME, _om
from ._views import _cpu_view

# c10d's collective ops with a kernel per device (torch/csrc/distributed/c10d/Ops.cpp)
_OPS = (
    "allreduce_", "allreduce_coalesced_", "allgather_", "_allgather_base_", "allgather_coalesced_",
    "allgather_into_tensor_coalesced_", "reduce_scatter_", "_reduce_scatter_base_",
    "reduce_scatter_tensor_coalesced_", "broadcast_", "reduce_", "gather_", "scatter_", "alltoall_",
    "alltoall_base_", "send", "recv_", "recv_any_source_", "barrier",
)

_library: torch.library.Library | None = None  # holds the kernels' registration for the process


def register() -> None:
    """gloo serves openreg devices; the openreg kernels of c10d's ops run gloo on CPU views."""
    global _library
    devices = dist.Backend.backend_capability.setdefault(dist.Backend.GLOO, [])
    if BACKEND_NAME not in devices:
        devices.append(BACKEND_NAME)
    if _library is not None:
        return
    library = torch.library.Library("c10d", "IMPL")
    with warnings.catch_warnings():
        # "Overriding a previously registered kernel": torch's, which gloo cannot serve (the Note)
        warnings.simplefilter("ignore", UserWarning)
        for name in _OPS:
            packet = getattr(torch.ops.c10d, name, None)
            if packet is not None:
                library.impl(name, _kernel(packet.default), "PrivateUse1")
    _library = library


def _kernel(op):
    def run(*args):
        views: dict[int, torch.Tensor] = {}  # id(view) -> the openreg tensor it shows
        streams: dict[torch.device, object] = {}

        def to_cpu(obj):
            if isinstance(obj, torch.Tensor) and obj.device.type == BACKEND_NAME:
                if obj.device not in streams:
                    streams[obj.device] = _om().current_stream(obj.device)
                view = _cpu_view(obj)
                views[id(view)] = obj
                return view
            if isinstance(obj, (list, tuple)):
                return type(obj)(to_cpu(o) for o in obj)
            if isinstance(obj, torch.ScriptObject) and obj._type().qualified_name().endswith(".c10d.ProcessGroup"):
                _check_gloo_serves_openreg(obj)
            return obj

        mapped = [to_cpu(a) for a in args]
        for stream in streams.values():
            stream.synchronize()  # type: ignore[attr-defined]  # gloo reads the tensors from now on
        keep = list(views.values())
        result = op(*mapped)

        def back(obj):
            if isinstance(obj, torch.Tensor):
                return views.get(id(obj), obj)
            if isinstance(obj, (list, tuple)):
                return type(obj)(back(o) for o in obj)
            return obj

        _hold(dist.Work.unbox(result[-1] if isinstance(result, tuple) else result), keep)
        return back(result)

    return run


# (gloo's Work, the openreg tensors it reads or writes through views): held until the Work ends. gloo's
# send and recv Works have no future to tell when, so the list is pruned at each later call.
_in_flight: list[tuple[dist.Work, list[torch.Tensor]]] = []
_in_flight_lock = threading.Lock()


def _hold(work: dist.Work, tensors: list[torch.Tensor]) -> None:
    with _in_flight_lock:
        _in_flight[:] = [(w, ts) for w, ts in _in_flight if not w.is_completed()]
        if tensors and not work.is_completed():
            _in_flight.append((work, tensors))


def _check_gloo_serves_openreg(boxed) -> None:
    """The CPU kernel runs the group's CPU backend: it must be the one serving openreg (it is for any
    gloo group; a group with another backend for openreg is not one of c10d's gloo groups)."""
    pg = dist.ProcessGroup.unbox(boxed)
    device = torch.device(BACKEND_NAME)
    backend = pg._get_backend(device)  # raises c10d's "No backend type associated with device type"
    if not isinstance(backend, dist.ProcessGroupGloo) or not isinstance(
            pg._get_backend(torch.device("cpu")), dist.ProcessGroupGloo):
        raise RuntimeError(
            f"openreg distributed: the group's backend for openreg tensors is {type(backend).__name__}; "
            f"openreg tensors go through gloo or the openreg backend"
        )
