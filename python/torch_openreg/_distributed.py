"""torch.distributed on openreg: the ``openreg`` c10d backend, gloo driving zero-copy CPU views.

Registered at import (autoload) with ``Backend.register_backend("openreg", ..., devices=["openreg"])``;
registration only records a factory, so nothing is created until ``init_process_group`` runs.
``init_process_group()`` with no backend named then uses it for openreg tensors, and
``"cpu:gloo,openreg:openreg"`` names it explicitly.

Note [openreg collectives over gloo]
openreg device memory is host memory, so a CPU tensor built over the same address (``_cpu_view``) is a
zero-copy view that gloo can read and write. The group holds one ``ProcessGroupGloo`` and forwards every
collective to it with openreg tensors replaced by their views and CPU tensors passed through, so the
rendezvous, TCP transport across hosts, algorithms and timeouts are all gloo's. The group is a Python
``ProcessGroup`` subclass (c10d's ``Backend`` cannot be subclassed from Python), and c10d uses such a
group as the whole process group: CPU tensors therefore also go to the inner gloo group.

Note [Stream-ordered collectives]
NCCL's semantics, without blocking the host:
- Issue (caller's thread): an event is recorded on the current stream of the tensors' device, and the
  collective is queued on the group's communication thread. The call returns at once.
- The communication thread (one per group, so every rank issues the group's collectives to gloo in the
  same order, as a communicator's stream orders NCCL's) waits for that event (only it blocks: no compute
  thread, no stream), runs gloo on the CPU views, waits for gloo (gloo's wait releases the GIL; the
  thread holds the GIL only to issue and for AVG/PREMUL_SUM scaling), then completes the collective's
  end: a host-completed event record (Note [Host-completed records] in sim/src/event.cpp).
- ``Work.wait()`` / ``synchronize()`` make the caller's current stream wait on that end, device-side: the
  stream parks and the host goes on (as NCCL's). ``dist.all_reduce(t)`` without async_op is the same
  (c10d waits on the Work at once). ``is_completed()`` says whether the collective has ended;
  ``get_future()`` is a Future on the device whose value is ready, stream-ordered, after the collective
  (its events are recorded on a side stream that waits on the end), for DDP comm hooks.
- A failed collective (gloo's timeout naming the operation, a dead peer) fails the end record with
  "openreg distributed <op> on openreg:N failed: ...": every stream that waited on it reports it at its
  next synchronize, like a failed kernel, and Work.wait() raises it if it is already known.
- Tensors in flight are held by the queued job until the collective has ended, so their blocks cannot
  be freed (nor reused) meanwhile; after that, their prior uses are all complete (stream work before the
  start event, the collective itself), so the allocator may hand them out again at once.
- barrier() and collectives on CPU tensors only go through the same queue (ordering), and their Work's
  wait() blocks the host until they have ended (gloo's behaviour, and NCCL's barrier).
- The GIL: device threads never take it. The communication threads take it only to hand a collective
  to gloo, to scale AVG / PREMUL_SUM results and to complete the end (briefly); their waits (the start
  event, gloo's Work) release it. So a host thread must not block on the device while holding the GIL
  with a collective pending on that device: torch's ops, synchronize, Stream/Event waits all release
  it; storage.resize_(0) (FSDP2's free) used to synchronize the device with the GIL held, and now frees
  stream-ordered instead, as CUDA does (backend/ops/Resize.cpp).
- Bad arguments raise at the call, on the caller's thread, before anything is queued: the device and
  contiguity checks, and the checks gloo would make when handed the collective (sizes, dtypes, root and
  peer ranks, split sizes; see "argument checks on the calling thread" below), with NCCL's exception
  types. Were they left to gloo they would be raised on the communication thread and surface only as a
  failed collective at the waiting stream's next synchronize. What gloo still finds (anything these
  checks miss) surfaces that way.

Note [split_group on openreg]
c10d's ``dist.split_group`` works on a group bound to a device, and c10d binds the device given as
``init_process_group(device_id=)`` to the ProcessGroup it made, not to the group a Python plugin returns
in its place. It then asks "the backend of the accelerator" (our ``_get_backend``: the inner gloo, a
``_Gloo``) whether it can split, deep-copies its options, and calls the parent group's ``split_group``.
So: c10d's eager connection of the bound device (``_Gloo.eager_connect_single_device``, called only when
a device is bound) binds it to our group; ``_Gloo.options`` are gloo's options in a subclass that
``copy.deepcopy`` can copy (gloo's own cannot be pickled); and ``ProcessGroupOpenReg.split_group`` is the
split: a new openreg group, over a new gloo group that rendezvouses under the parent's store, on the
ranks of the split; the others get None and wait for nobody. The store prefix is the parent's split
count, not the name c10d gives the child (which counts the groups each rank belongs to, so it differs
between ranks after a split that left one out). A bound device also makes c10d ask every later group for
a backend on it, which a plain ``new_group(backend="gloo")`` lacks; gloo is then registered for openreg
devices too (``_gloo_groups_accept_bound_device``), so such a group is made, and refuses openreg tensors
itself. DeviceMesh takes the split path on a bound group (as with NCCL).
"""

from __future__ import annotations

import ctypes
import queue
import threading
import weakref
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

BACKEND_NAME = "openreg"


def _om() -> Any:
    """torch.openreg (registered at runtime, so unknown to type checkers)."""
    return torch.openreg  # type: ignore[attr-defined]


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


# --- the communication queue -----------------------------------------------------------------------


class _Job:
    """One collective queued on a group's communication thread (Note [Stream-ordered collectives])."""

    def __init__(self, op: str, device, launches, post, keep, start) -> None:
        self.op = op
        self.device = device
        self._launches = launches  # callables issuing gloo collectives on CPU views; each returns a Work
        self._post = post  # runs on the CPU views after gloo (AVG / PREMUL_SUM scaling), or None
        self._keep = keep  # the openreg tensors in flight: alive until the collective has ended
        self._start = start  # torch.Event on the issuing stream, or None
        self.end = None
        if device is not None:
            self.end = torch_openreg_C()._CollectiveEvent(device.index)
            # The device timeline shows the collective on the device's communication lane.
            self.end.set_trace(f"collective:{op}", _comm_lane(device))
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.gloo_works: list = []

    def issue(self) -> bool:
        """Waits for the work queued before the collective, then hands it to gloo (which runs it on its
        own threads). False if it failed already."""
        try:
            if self._start is not None:
                try:
                    self._start.synchronize()  # releases the GIL while it waits
                except RuntimeError:
                    # A kernel before the collective failed: its stream keeps reporting that. The
                    # collective still runs, so the peers are not left waiting (NCCL runs it too).
                    pass
                self._start = None
            if self.end is not None:
                self.end.mark_started()
            self.gloo_works = [launch() for launch in self._launches]
            return True
        except BaseException as err:  # noqa: BLE001 - handed to whoever waits on the collective
            self._finish(err)
            return False

    def complete(self) -> None:
        """Waits for gloo (bounded by its timeout), scales AVG / PREMUL_SUM results, ends the job."""
        try:
            for w in self.gloo_works:
                if w is not None:
                    w.wait()  # releases the GIL
            if self._post is not None:
                self._post()
        except BaseException as err:  # noqa: BLE001 - handed to whoever waits on the collective
            self._finish(err)
        else:
            self._finish(None)

    def _finish(self, err) -> None:
        if err is not None:
            where = f" on {self.device}" if self.device is not None else ""
            self.error = RuntimeError(f"openreg distributed {self.op}{where} failed: {err}")
            self.error.__cause__ = err
        self._keep = None  # the blocks may be reused from now on: every use of them has ended
        self._start = None
        if self.end is not None:
            if self.error is None:
                self.end.complete()
            else:
                self.end.fail(str(self.error))
        self.done.set()


class _CommQueue:
    """A group's communication queue: an issuing thread hands its collectives to gloo one at a time, in
    issue order, and a completing thread waits for them in that order and ends them. Two threads, so
    that a collective waiting for its peers (a send waiting for the matching recv, as in
    batch_isend_irecv) never keeps the next one from being issued."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._issue: queue.SimpleQueue = queue.SimpleQueue()
        self._complete: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def submit(self, job: _Job) -> None:
        with self._lock:
            if not self._threads:
                # daemon: a job is bounded by gloo's timeout, but interpreter exit must never wait on it.
                for target, role in ((self._issue_loop, "issue"), (self._complete_loop, "complete")):
                    t = threading.Thread(target=target, name=f"openreg-comm-{role}-{self._name}", daemon=True)
                    t.start()
                    self._threads.append(t)
            self._issue.put(job)

    def _issue_loop(self) -> None:
        while True:
            job = self._issue.get()
            if job is None:
                self._complete.put(None)
                return
            if job.issue():
                self._complete.put(job)

    def _complete_loop(self) -> None:
        while True:
            job = self._complete.get()
            if job is None:
                return
            job.complete()

    def close(self, timeout_s: float) -> None:
        with self._lock:
            threads, self._threads = self._threads, []
        if threads:
            self._issue.put(None)
            for t in threads:
                t.join(timeout_s)


def torch_openreg_C():  # noqa: N802 - imported lazily: registration must not load the extension
    from torch_openreg import _C

    return _C


# --- Works -----------------------------------------------------------------------------------------


def _stream_args(stream):
    return stream.stream_id, stream.device_index, stream.device_type


_side_streams: dict[int, torch.Stream] = {}
_comm_streams: dict[int, torch.Stream] = {}
_side_lock = threading.Lock()


def _comm_lane(device: torch.device) -> int:
    """Stream id of the device's communication lane in torch.openreg.trace: a stream that only names
    the lane (collectives run on the communication threads, not on it)."""
    with _side_lock:
        s = _comm_streams.get(device.index)
        if s is None:
            s = _comm_streams[device.index] = _om().Stream(device)
        return s.stream_id


def _side_stream(device: torch.device):
    with _side_lock:
        s = _side_streams.get(device.index)
        if s is None:
            s = _side_streams[device.index] = _om().Stream(device)
        return s


class _Work(dist.Work):
    """What the Works of a device collective and of a host one share: state read from the queued job."""

    def __init__(self, job: _Job, outputs: list[torch.Tensor]) -> None:
        super().__init__()
        self._job = job
        self._outputs = outputs
        self._future: torch.futures.Future | None = None

    def synchronize(self) -> None:
        self.wait()

    def is_completed(self) -> bool:
        return self._job.done.is_set()

    def is_success(self) -> bool:
        return self._job.done.is_set() and self._job.error is None

    def exception(self):
        return self._job.error

    def _source_rank(self) -> int:
        self._job.done.wait()  # bounded: the job ends by gloo's timeout at the latest
        if self._job.error is not None:
            raise self._job.error
        return self._job.gloo_works[0]._source_rank()


class _DeviceWork(_Work):
    """Work of a collective on openreg tensors: waits are device-side (Note [Stream-ordered collectives])."""

    def wait(self, timeout=None) -> bool:
        if self._job.error is not None:
            raise self._job.error
        end = self._job.end
        assert end is not None  # a device collective always has one
        end.block(*_stream_args(_om().current_stream(self._job.device)))
        return True

    def get_future(self):
        if self._future is None:
            fut: torch.futures.Future = torch.futures.Future(devices=[self._job.device])
            side = _side_stream(self._job.device)
            end = self._job.end
            assert end is not None  # a device collective always has one
            end.block(*_stream_args(side))
            with _om().stream(side):
                # The future's events are recorded here, after the wait: its users are stream-ordered
                # after the collective, and a failure reaches them through the wait.
                fut.set_result(self._outputs)
            self._future = fut
        return self._future


class _HostWork(_Work):
    """Work of a collective without openreg tensors (CPU tensors, barrier): wait() blocks the host."""

    def wait(self, timeout=None) -> bool:
        self._job.done.wait()  # bounded: the job ends by gloo's timeout at the latest
        if self._job.error is not None:
            raise self._job.error
        return True

    def get_future(self):
        if self._future is None:
            fut: torch.futures.Future = torch.futures.Future()
            try:
                self.wait()
            except Exception as err:  # noqa: BLE001 - handed to whoever waits on the future
                fut.set_exception(err)
            else:
                fut.set_result(self._outputs)
            self._future = fut
        return self._future


# --- reduction ops gloo lacks ----------------------------------------------------------------------


def _scale_of(opts, size: int):
    """(SUM options, scale) for AVG / PREMUL_SUM, which gloo lacks; (opts, None) otherwise."""
    op = getattr(opts, "reduceOp", None)
    if op is None:
        return opts, None
    if op == dist.ReduceOp.AVG:
        scale = ("avg", size)
    elif op == dist.ReduceOp.PREMUL_SUM:
        factor = op.factor
        if isinstance(factor, torch.Tensor):
            factor = factor.item()
        scale = ("mul", factor)
    else:
        return opts, None
    summed = type(opts)()
    for field in ("timeout", "rootRank", "rootTensor", "asyncOp"):
        if hasattr(opts, field):
            setattr(summed, field, getattr(opts, field))
    summed.reduceOp = dist.ReduceOp.SUM
    return summed, scale


def _apply_scale(views, scale) -> None:
    kind, value = scale
    for v in views:
        if kind == "mul":
            v.mul_(value)
        elif v.is_floating_point() or v.is_complex():
            v.div_(value)
        else:
            v.floor_divide_(value)  # integer AVG, as SUM // world


def _flatten(x) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for o in x for t in _flatten(o)]
    return []


# --- argument checks on the calling thread ----------------------------------------------------------
#
# gloo checks a collective's arguments when it is handed the collective, which here is on the
# communication thread: its errors would surface only at the next synchronize of the stream that waits
# on the collective. These checks run first, on the caller's thread, before anything is queued, and
# raise what NCCL raises for the tensor forms (TypeError for a dtype, ValueError for a size) and gloo's
# RuntimeError for the rest. Every rank makes the same bad call, so no rank issues it and the group
# stays in step. Each takes the group and gloo's arguments (c10d passes them positionally).


def _fail(op: str, msg: str, kind: type[Exception] = RuntimeError) -> None:
    raise kind(f"openreg distributed {op}: {msg}")


def _check_root(op: str, root: int, size: int) -> None:
    if not 0 <= root < size:
        _fail(op, f"invalid root rank: {root} (group size {size})")


def _check_peer(op: str, peer: int, size: int) -> None:
    if not 0 <= peer < size:
        _fail(op, f"invalid peer rank: {peer} (group size {size})")


def _check_like(op: str, tensors, ref: torch.Tensor, what: str = "tensor") -> None:
    """Every tensor has ``ref``'s dtype and shape (gloo's 'invalid tensor type/size at index')."""
    for i, t in enumerate(tensors):
        if t.dtype != ref.dtype:
            _fail(op, f"invalid {what} type at index {i} (expected {ref.dtype}, got {t.dtype})", TypeError)
        if t.shape != ref.shape:
            _fail(op, f"invalid {what} size at index {i} (expected {tuple(ref.shape)}, got {tuple(t.shape)})")


def _check_count(op: str, tensors, size: int, what: str) -> None:
    if len(tensors) != size:
        _fail(op, f"{what} has {len(tensors)} tensors, expected {size} (the group size)")


def _check_reduce_op(op: str, tensors, opts) -> None:
    red = getattr(opts, "reduceOp", None)
    if red is None:
        return
    # red == b, not red in (...): a RedOpType compares unequal to the ReduceOp in the options
    for name in ("BAND", "BOR", "BXOR"):
        if red == getattr(dist.ReduceOp, name) and any(t.is_floating_point() or t.is_complex() for t in tensors):
            _fail(op, f"Cannot use ReduceOp.{name} with non-integral dtype")


def _check_allreduce(pg, tensors, opts=None, *_) -> None:
    if not tensors:
        _fail("allreduce", "requires non-empty tensor list")
    _check_like("allreduce", tensors, tensors[0])
    _check_reduce_op("allreduce", tensors, opts)


def _check_allreduce_coalesced(pg, tensors, opts=None, *_) -> None:
    _check_reduce_op("allreduce_coalesced", tensors, opts)
    if len({t.dtype for t in tensors}) > 1:
        _fail("allreduce_coalesced", "tensors must all have the same type", TypeError)


def _check_rooted(op: str):
    def check(pg, tensors, opts, *_) -> None:
        _check_root(op, opts.rootRank, pg.size())
        _check_reduce_op(op, tensors, opts)

    return check


def _check_allgather(pg, output_lists, inputs, *_) -> None:
    if len(output_lists) != 1 or len(inputs) != 1:
        _fail("allgather", "requires a single-element output list and a single input tensor")
    _check_count("allgather", output_lists[0], pg.size(), "the output list")
    _check_like("allgather", output_lists[0], inputs[0], "output tensor")


def _check_reduce_scatter(pg, outputs, input_lists, opts=None, *_) -> None:
    if len(outputs) != 1 or len(input_lists) != 1:
        _fail("reduce_scatter", "requires a single output tensor and a single-element input list")
    _check_count("reduce_scatter", input_lists[0], pg.size(), "the input list")
    _check_like("reduce_scatter", input_lists[0], outputs[0], "input tensor")
    _check_reduce_op("reduce_scatter", outputs, opts)


def _check_world_sized(op: str, gather: bool, type_msg: str, size_msg: str):
    """all_gather_into_tensor (output = group size x input) and reduce_scatter_tensor (input = group
    size x output), with NCCL's messages and exception types."""

    def check(pg, output, inp, opts=None, *_) -> None:
        big, small = (output, inp) if gather else (inp, output)
        if output.dtype != inp.dtype:
            _fail(op, type_msg, TypeError)
        if big.numel() != small.numel() * pg.size():
            _fail(op, f"{size_msg} ({big.numel()} != {pg.size()} * {small.numel()})", ValueError)
        _check_reduce_op(op, [output], opts)

    return check


_check_allgather_base = _check_world_sized(
    "all_gather_into_tensor", True, "output tensor must have the same type as input tensor",
    "output tensor size must be equal to world_size times input tensor size")
_check_reduce_scatter_base = _check_world_sized(
    "reduce_scatter_tensor", False, "input tensor must be the same type as the output tensor.",
    "input tensor must be the same size as output size times world size")


def _check_splits(op: str, t: torch.Tensor, splits, size: int, what: str) -> None:
    if not splits:
        if t.dim() == 0 or t.size(0) % size != 0:
            _fail(op, f"{what} tensor's dim 0 does not divide equally across group size {size}")
        return
    if len(splits) != size:
        _fail(op, f"number of {what} splits ({len(splits)}) not equal to group size {size}")
    if t.dim() == 0 or sum(splits) != t.size(0):
        _fail(op, f"{what} split sizes {list(splits)} do not add up to dim 0 size "
                  f"{t.size(0) if t.dim() else 0}")


def _check_alltoall_base(pg, output, inp, out_splits, in_splits, *_) -> None:
    if output.dtype != inp.dtype:
        _fail("all_to_all_single", "input and output tensors must have the same type", TypeError)
    _check_splits("all_to_all_single", output, out_splits, pg.size(), "output")
    _check_splits("all_to_all_single", inp, in_splits, pg.size(), "input")
    if not out_splits and not in_splits and output.numel() != inp.numel():
        _fail("all_to_all_single", f"input and output tensors must have the same size with even splits "
                                   f"({inp.numel()} and {output.numel()} elements)", ValueError)


def _check_alltoall(pg, outputs, inputs, *_) -> None:
    _check_count("all_to_all", outputs, pg.size(), "the output list")
    _check_count("all_to_all", inputs, pg.size(), "the input list")
    for o, i in zip(outputs, inputs):
        if o.dtype != i.dtype:
            _fail("all_to_all", "input and output tensors must have the same type", TypeError)


def _check_rooted_list(op: str, list_first: bool):
    """gather (the root's list of outputs is the first argument) and scatter (its list of inputs is the
    second): the root has one tensor per rank, like the other side's single tensor; the others none."""
    listed, single = ("output", "input") if list_first else ("input", "output")

    def check(pg, first, second, opts, *_) -> None:
        lists, singles = (first, second) if list_first else (second, first)
        _check_root(op, opts.rootRank, pg.size())
        if len(singles) != 1:
            _fail(op, f"requires a single {single} tensor")
        if pg.rank() == opts.rootRank:
            if len(lists) != 1:
                _fail(op, f"requires a single-element {listed} list on the root")
            _check_count(op, lists[0], pg.size(), f"the {op} list")
            _check_like(op, lists[0], singles[0], f"{listed} tensor")
        elif any(len(x) for x in lists):
            _fail(op, f"requires empty {listed} on non-root ranks", ValueError)

    return check


def _check_p2p(op: str):
    def check(pg, tensors, peer, *_) -> None:
        if len(tensors) != 1:
            _fail(op, f"requires a single tensor, got {len(tensors)}")
        _check_peer(op, peer, pg.size())

    return check


# The collectives, c10d's method name -> (gloo's method, its argument check). Every one is issued by
# ProcessGroupOpenReg._run, the single path every collective takes (the sanitizer hooks in there).
# gloo keeps the older names of torch 2.13's single-tensor collectives.
_COLLECTIVES: dict[str, tuple[str, Any]] = {
    "allreduce": ("allreduce", _check_allreduce),
    "allreduce_coalesced": ("allreduce_coalesced", _check_allreduce_coalesced),
    "broadcast": ("broadcast", _check_rooted("broadcast")),
    "reduce": ("reduce", _check_rooted("reduce")),
    "allgather": ("allgather", _check_allgather),
    "_allgather_base": ("_allgather_base", _check_allgather_base),
    "all_gather_single": ("_allgather_base", _check_allgather_base),
    "allgather_coalesced": ("allgather_coalesced", None),
    "reduce_scatter": ("reduce_scatter", _check_reduce_scatter),
    "_reduce_scatter_base": ("_reduce_scatter_base", _check_reduce_scatter_base),
    "reduce_scatter_single": ("_reduce_scatter_base", _check_reduce_scatter_base),
    "alltoall": ("alltoall", _check_alltoall),
    "alltoall_base": ("alltoall_base", _check_alltoall_base),
    "all_to_all_single": ("alltoall_base", _check_alltoall_base),
    "gather": ("gather", _check_rooted_list("gather", list_first=True)),
    "scatter": ("scatter", _check_rooted_list("scatter", list_first=False)),
    "send": ("send", _check_p2p("send")),
    "recv": ("recv", _check_p2p("recv")),
    "recv_anysource": ("recv_anysource", None),
    "barrier": ("barrier", None),
    "monitored_barrier": ("monitored_barrier", None),
}
# The coalesced single-tensor collectives (gloo has none): one gloo collective per (output, input)
# pair, issued in order by one job (one Work, one end). Name -> (gloo's method, options type).
_PAIRWISE: dict[str, tuple[str, Any]] = {
    "all_gather_single_coalesced": ("_allgather_base", dist.distributed_c10d.AllgatherOptions),
    "allgather_into_tensor_coalesced": ("_allgather_base", dist.distributed_c10d.AllgatherOptions),
    "reduce_scatter_single_coalesced": ("_reduce_scatter_base", dist.distributed_c10d.ReduceScatterOptions),
    "reduce_scatter_tensor_coalesced": ("_reduce_scatter_base", dist.distributed_c10d.ReduceScatterOptions),
}
_CHECKS = {gloo: check for gloo, check in _COLLECTIVES.values() if check is not None}


def _collective(name: str, gloo_name: str):
    """The group's method ``name``: gloo's ``gloo_name`` on CPU views, through the common path."""

    def method(self, *args, **kwargs):
        return self._run(name, [(gloo_name, args, kwargs)])

    method.__name__ = name
    return method


def _pairwise(name: str, gloo_name: str, options_type):
    def method(self, outputs, inputs, opts=None):
        opts = options_type() if opts is None else opts
        return self._run(name, [(gloo_name, (o, i, opts), None) for o, i in zip(outputs, inputs)])

    method.__name__ = name
    return method


# --- the group ---------------------------------------------------------------------------------------


class _GlooOptions(dist.ProcessGroupGloo._Options):  # type: ignore[name-defined]
    """gloo's options, copyable by ``copy.deepcopy`` (c10d's split_group deep-copies the parent's; the
    C++ class cannot be pickled, so it cannot be deep-copied)."""

    @classmethod
    def of(cls, src) -> _GlooOptions:
        copy = cls()
        copy._timeout = src._timeout
        copy._threads = src._threads
        copy._devices = list(src._devices)  # gloo's transport devices are shared between groups
        copy.global_ranks_in_group = list(src.global_ranks_in_group)
        copy.group_name = src.group_name
        return copy

    def __deepcopy__(self, memo) -> _GlooOptions:
        return _GlooOptions.of(self)


class _Gloo(dist.ProcessGroupGloo):
    """The group's inner gloo group. c10d takes it for the group's backend on every device (see
    ProcessGroupOpenReg._get_backend), and asks it two things on the openreg device's behalf:
    - ``eager_connect_single_device(device)``: called by init_process_group / new_group when a device
      is bound (``device_id=``). c10d binds the device to the ProcessGroup it created, not to the group
      a Python plugin returns, so the binding is made here: split_group needs it.
    - ``options``: deep-copied by split_group for the child's options (see _GlooOptions).
    """

    def __init__(self, store, rank: int, size: int, timeout: timedelta, owner: ProcessGroupOpenReg) -> None:
        super().__init__(store, rank, size, timeout)
        self._owner = weakref.ref(owner)  # the group owns this one: no cycle

    @property
    def options(self) -> _GlooOptions:
        return _GlooOptions.of(super().options)

    def eager_connect_single_device(self, device) -> None:
        owner = self._owner()
        if owner is not None and device is not None and torch.device(device).type == BACKEND_NAME:
            owner.bound_device_id = torch.device(device)
            _gloo_groups_accept_bound_device()
        super().eager_connect_single_device(device)


def _gloo_groups_accept_bound_device() -> None:
    """Once a group is bound to an openreg device, c10d asks every group created after it (new_group
    passes the default group's bound device on) for its backend on that device; a plain gloo group
    (``new_group(backend="gloo")``, for CPU tensors) has none and its creation would fail. So gloo is
    registered for openreg from then on: such a group is created, and an openreg tensor given to it is
    refused by gloo itself ("unsupported device type openreg"), as before."""
    devices = dist.Backend.backend_capability.setdefault(dist.Backend.GLOO, [])
    if BACKEND_NAME not in devices:
        devices.append(BACKEND_NAME)


class ProcessGroupOpenReg(dist.ProcessGroup):
    """c10d group for openreg (and CPU) tensors over an inner gloo group.

    See Note [openreg collectives over gloo] and Note [Stream-ordered collectives]. Its collectives are
    the methods made from _COLLECTIVES and _PAIRWISE below; every one goes through ``_run``.
    """

    def __init__(self, store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]
        self._gloo = _Gloo(store, rank, size, timeout, self)
        # c10d keeps a group's name on its backends ("ProcessGroup name not set" without one).
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self._gloo)
        self._store = store
        self._timeout = timeout
        self._splits = 0
        self._coalesced_work: dist.Work | None = None  # the last Work issued (see _end_coalescing)
        self._queue = _CommQueue(f"pg{id(self):x}")

    def getBackendName(self) -> str:  # noqa: N802 - c10d's name
        return BACKEND_NAME

    def get_group_store(self):
        # c10d records it for split groups; the C++ base has none (a Python subclass cannot pass one).
        return self._store

    def _get_backend(self, device):
        # c10d asks the backend of a device for its capabilities (splitting, sequence numbers) and
        # eager connection; gloo's answers are ours. Collectives never go through it: c10d calls the
        # group's methods above, which queue them (Note [Stream-ordered collectives]).
        return self._gloo

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None, device_types=None):
        """c10d's split hook (``dist.split_group``): a new openreg group of the parent ranks ``ranks``,
        over a new gloo group that rendezvouses in the parent's store; None on ranks outside it.

        Unlike NCCL's communicator split, the ranks outside take no part, so none of them waits.
        """
        if opts is not None and not isinstance(opts, dist.ProcessGroupGloo._Options):  # type: ignore[attr-defined]
            raise TypeError(
                f"openreg distributed split_group: pg_options must be gloo's options "
                f"(ProcessGroupGloo._Options), got {type(opts).__name__}"
            )
        for device in device_types or []:
            if torch.device(device).type not in ("cpu", BACKEND_NAME):
                raise ValueError(f"openreg distributed split_group: no backend for device type {device}")
        ranks = sorted(int(r) for r in ranks)
        if len(set(ranks)) != len(ranks) or not all(0 <= r < self.size() for r in ranks):
            raise ValueError(f"openreg distributed split_group: invalid ranks {ranks} for a group of {self.size()}")
        self._splits += 1  # every parent rank splits in the same order (c10d's contract)
        if self.rank() not in ranks:
            return None
        if timeout is None:
            timeout = opts._timeout if opts is not None else self._timeout
        name = dist.distributed_c10d.GroupName(group_name or f"{self.group_name}:split:{self._splits}")
        # Not the name: c10d's split names count the groups this rank belongs to, which differ between
        # the ranks once a split has left one out. The parent's split count is the same on all of them.
        store = dist.PrefixStore(f"split/{self._splits}/", self._store)
        child = ProcessGroupOpenReg(store, ranks.index(self.rank()), len(ranks), timeout)
        child._set_group_name(name)
        child._set_group_desc(group_desc or f"{self.group_desc}:split:{self._splits}")
        child.bound_device_id = self.bound_device_id
        return child

    # c10d's _coalescing_manager(device=...) brackets its collectives with these: the collectives
    # already run in order on one queue, so the bracket only returns the last one's Work (it ends
    # after all earlier ones, since the completing thread ends them in issue order).
    def _start_coalescing(self, device) -> None:
        self._coalesced_work = None

    def _end_coalescing(self, device):
        work, self._coalesced_work = self._coalesced_work, None
        return work

    def shutdown(self) -> None:
        # Pending collectives end first (each bounded by gloo's timeout), then c10d shuts gloo down.
        self._queue.close(self._timeout.total_seconds())
        super().shutdown()

    def _run(self, op: str, calls):
        """The one path of every collective: checks the arguments of gloo's ``calls``
        [(gloo name, args, kwargs)] here, then queues one job that runs them in order."""
        for gloo_name, args, kwargs in calls:
            check = _CHECKS.get(gloo_name)
            if check is not None:
                check(self, *args, **(kwargs or {}))
        conv = _Converter(op)
        launches: list = []
        outputs: list[torch.Tensor] = []
        post_views: list = []
        for gloo_name, args, kwargs in calls:
            args = list(args)
            scale = None
            if args and hasattr(args[-1], "reduceOp"):
                args[-1], scale = _scale_of(args[-1], self.size())
            mapped = conv.map(tuple(args))
            mapped_kwargs = {k: conv.map(v) for k, v in (kwargs or {}).items()}
            if args:
                outputs.extend(_flatten(args[0]))  # every collective's outputs are its first argument
            if scale is not None:
                views = _flatten(mapped[0])
                if gloo_name == "reduce" and mapped[-1].rootRank != self.rank():
                    views = []  # only the root's output is defined
                post_views.append((views, scale))
            launches.append(lambda g=gloo_name, a=mapped, k=mapped_kwargs: getattr(self._gloo, g)(*a, **k))

        def post():
            for views, scale in post_views:
                _apply_scale(views, scale)

        start = None
        if conv.device is not None:
            start = torch.Event()
            start.record(_om().current_stream(conv.device))
        job = _Job(op, conv.device, launches, post if post_views else None, conv.keep, start)
        self._queue.submit(job)
        work: dist.Work
        if conv.device is None:
            work = _HostWork(job, outputs)
        else:
            work = _DeviceWork(job, [t for t in outputs if t.device.type == BACKEND_NAME])
        self._coalesced_work = work
        return work


for _name, (_gloo_name, _) in _COLLECTIVES.items():
    setattr(ProcessGroupOpenReg, _name, _collective(_name, _gloo_name))
for _name, (_gloo_name, _opts_type) in _PAIRWISE.items():
    setattr(ProcessGroupOpenReg, _name, _pairwise(_name, _gloo_name, _opts_type))


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
