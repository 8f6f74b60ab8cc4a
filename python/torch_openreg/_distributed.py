"""torch.distributed on openreg: the ``openreg`` c10d backend, gloo driving zero-copy CPU views.

Registered at import (autoload) with ``Backend.register_backend("openreg", ..., devices=["openreg"])``;
registration only records a factory, so nothing is created until ``init_process_group`` runs.
``init_process_group()`` with no backend named then uses it for openreg tensors, and
``"cpu:gloo,openreg:openreg"`` names it explicitly.

Note [openreg collectives over gloo]
openreg device memory is host memory, so a CPU tensor built over the same address (``_cpu_view``) is a
zero-copy view that gloo can read and write. The group holds one ``ProcessGroupGloo`` and forwards every
collective to it with openreg tensors replaced by their views and CPU tensors passed through, so the
rendezvous, TCP transport across hosts, algorithms and timeouts are all gloo's.

Ordering (differs from NCCL, see the README): a collective first synchronizes the current stream of its
tensors' device, so it sees every kernel queued before it (NCCL: a device-side wait, the host does not
block). gloo then runs it on its own threads; the returned Work's ``wait()`` blocks the host until gloo
is done (NCCL: the current stream waits, the host does not), after which later stream work sees the
result because it is already in memory. Tensors in flight are held by the Work and its future until the
collective ends, so their blocks cannot be freed and reused meanwhile.

The group is a Python ``ProcessGroup`` subclass (c10d's ``Backend`` cannot be subclassed from Python),
and c10d uses such a group as the whole process group: CPU tensors therefore also go to the inner gloo
group, so ``"cpu:gloo,openreg:openreg"`` behaves as intended.
"""

from __future__ import annotations

import ctypes
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

BACKEND_NAME = "openreg"


def _cpu_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the same bytes as the openreg tensor ``t`` (no copy).

    The view does not own the memory: whoever uses it keeps ``t`` alive (the Work does).
    """
    storage = t.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
    raw = (ctypes.c_char * nbytes).from_address(storage.data_ptr())
    flat = torch.frombuffer(raw, dtype=torch.uint8)
    typed = flat.view(t.dtype) if t.element_size() == 1 or nbytes % t.element_size() == 0 else None
    if typed is None:
        raise RuntimeError("openreg distributed: storage size is not a multiple of the element size")
    return typed.as_strided(t.shape, t.stride(), t.storage_offset())


class _Converter:
    """Maps one collective's arguments to CPU views; remembers the openreg device and the originals."""

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


def _is_avg(opts) -> bool:
    op = getattr(opts, "reduceOp", None)
    return op is not None and op == dist.ReduceOp.AVG


class _OpenRegWork(dist.Work):
    """A gloo Work over CPU views that keeps the openreg tensors alive until it has been waited on.

    wait() is gloo's (it raises gloo's error, e.g. a timeout naming the operation). get_future() yields
    the openreg tensors, for DDP comm hooks.
    """

    def __init__(self, op: str, gloo_work, device: torch.device, tensors: list[torch.Tensor]) -> None:
        super().__init__()
        self._op = op
        self._gloo_work = gloo_work
        self._device = device
        self._tensors = tensors
        self._future = None

    def wait(self, timeout=None) -> bool:
        try:
            if timeout is None:
                self._gloo_work.wait()
            else:
                self._gloo_work.wait(timeout)
        except RuntimeError as err:
            # gloo names the transport step ("recv operation"); users need the collective too.
            raise RuntimeError(f"openreg distributed {self._op} on {self._device} failed: {err}") from err
        return True

    def synchronize(self) -> None:
        self.wait()

    def is_completed(self) -> bool:
        return self._gloo_work.is_completed()

    def is_success(self) -> bool:
        return self._gloo_work.is_success()

    def exception(self):
        return self._gloo_work.exception()

    def get_future(self):
        if self._future is None:
            fut = torch.futures.Future(devices=[self._device])
            # Blocks until gloo is done: gloo's own future can complete without its error.
            try:
                self.wait()
            except Exception as err:  # noqa: BLE001 - handed to whoever waits on the future
                fut.set_exception(err)
            else:
                fut.set_result(self._tensors)
            self._future = fut
        return self._future


def _forward(name: str, gloo_name: str | None = None):
    """A group method that runs gloo's ``gloo_name`` (default: the same name) on CPU views."""
    target = gloo_name or name

    def method(self, *args, **kwargs):
        return self._run(target, args, kwargs)

    method.__name__ = name
    return method


class ProcessGroupOpenReg(dist.ProcessGroup):
    """c10d group for openreg (and CPU) tensors over an inner gloo group. See Note [openreg collectives over gloo]."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        # c10d keeps a group's name on its backends ("ProcessGroup name not set" without one).
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self._gloo)
        self._timeout = timeout

    def getBackendName(self) -> str:  # noqa: N802 - c10d's name
        return BACKEND_NAME

    def _run(self, name: str, args: tuple, kwargs: dict | None = None):
        if name in ("allreduce", "_reduce_scatter_base") and len(args) == 2 and _is_avg(args[1]):
            return self._run_avg(name, args)
        return self._run_op(name, args, kwargs)

    def _run_avg(self, name: str, args: tuple):
        # gloo has no AVG: SUM, then divide the result in place once it is there (NCCL computes AVG
        # itself). Waits for the collective on the caller's thread.
        opts = type(args[1])()
        opts.reduceOp = dist.ReduceOp.SUM
        opts.timeout = args[1].timeout
        work = self._run_op(name, (args[0], opts))
        work.wait()
        outputs = args[0] if name == "allreduce" else [args[0]]
        for t in outputs:
            if t.is_floating_point() or t.is_complex():
                t.div_(self.size())
            else:
                t.floor_divide_(self.size())
        return work

    def _run_op(self, name: str, args: tuple, kwargs: dict | None = None):
        conv = _Converter(name)
        mapped = conv.map(args)
        mapped_kwargs = {k: conv.map(v) for k, v in (kwargs or {}).items()}
        if conv.device is not None:
            # Orders the collective after the kernels already queued (see the Note).
            torch.openreg.current_stream(conv.device).synchronize()
        work = getattr(self._gloo, name)(*mapped, **mapped_kwargs)
        if conv.device is None or work is None:
            return work
        return self._wrap(work, conv, args)

    def _wrap(self, work, conv: _Converter, args: tuple):
        return _OpenRegWork(conv.op, work, conv.device, conv.keep)

    allreduce = _forward("allreduce")
    allreduce_coalesced = _forward("allreduce_coalesced")
    broadcast = _forward("broadcast")
    reduce = _forward("reduce")
    allgather = _forward("allgather")
    _allgather_base = _forward("_allgather_base")
    allgather_coalesced = _forward("allgather_coalesced")
    allgather_into_tensor_coalesced = _forward("allgather_into_tensor_coalesced")
    reduce_scatter = _forward("reduce_scatter")
    _reduce_scatter_base = _forward("_reduce_scatter_base")
    reduce_scatter_tensor_coalesced = _forward("reduce_scatter_tensor_coalesced")
    # torch 2.13's names for the single-tensor collectives; gloo keeps the older ones.
    all_gather_single = _forward("all_gather_single", "_allgather_base")
    reduce_scatter_single = _forward("reduce_scatter_single", "_reduce_scatter_base")
    all_to_all_single = _forward("all_to_all_single", "alltoall_base")

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced("_allgather_base", outputs, inputs, dist.AllgatherOptions() if opts is None else opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced(
            "_reduce_scatter_base", outputs, inputs, dist.ReduceScatterOptions() if opts is None else opts
        )

    allgather_into_tensor_coalesced = all_gather_single_coalesced
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def _coalesced(self, gloo_name, outputs, inputs, opts):
        # gloo has no coalesced single-tensor collectives: one collective per pair, issued in order on
        # every rank, with one Work that completes when all of them have.
        works = [self._run(gloo_name, (o, i, opts)) for o, i in zip(outputs, inputs)]
        fut = torch.futures.collect_all([w.get_future() for w in works])
        devices = [o.device for o in outputs if o.device.type == BACKEND_NAME]
        out = torch.futures.Future(devices=devices[:1])

        def done(f):
            try:
                for w in works:
                    w.wait()
            except Exception as err:  # noqa: BLE001 - handed to whoever waits
                out.set_exception(err)
                return
            out.set_result(list(outputs))

        fut.add_done_callback(done)
        return _create_work_from_future(out)

    alltoall = _forward("alltoall")
    alltoall_base = _forward("alltoall_base")
    gather = _forward("gather")
    scatter = _forward("scatter")
    send = _forward("send")
    recv = _forward("recv")
    recv_anysource = _forward("recv_anysource")
    barrier = _forward("barrier")
    monitored_barrier = _forward("monitored_barrier")


def _create(opts, backend_options) -> ProcessGroupOpenReg:
    # The extended API hands us the group's name: c10d does not name a Python group it returns as the
    # whole process group, and DeviceMesh/functional collectives resolve groups by name.
    pg = ProcessGroupOpenReg(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    pg._set_group_name(opts.group_id)
    return pg


def register() -> None:
    """Registers the backend name with c10d (records a factory only)."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=[BACKEND_NAME])
