"""The openreg c10d group: ``ProcessGroupOpenReg``, and ``_run``, the one path of its collectives.

Note [openreg collectives over gloo]
openreg device memory is host memory, so a CPU tensor built over the same address (``_cpu_view`` in
_views.py) is a zero-copy view that gloo can read and write. The group holds one ``ProcessGroupGloo``
(``_Gloo`` in _gloo.py) and forwards every collective to it with openreg tensors replaced by their views
and CPU tensors passed through, so the rendezvous, TCP transport across hosts, algorithms and timeouts
are all gloo's. The group is a Python ``ProcessGroup`` subclass (c10d's ``Backend`` cannot be subclassed
from Python), and c10d uses such a group as the whole process group: CPU tensors therefore also go to
the inner gloo group. Its collectives are queued, stream-ordered (Note [Stream-ordered collectives] in
_comm_queue.py).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from . import _clock, _collectives
from ._comm_queue import _CommQueue, _Job
from ._device import BACKEND_NAME, _flatten, _om, _stream_args
from ._gloo import _Gloo
from ._reduce_ops import _apply_scale, _scale_of
from ._views import _Converter
from ._work import _BarrierWork, _DeviceWork, _HostWork


class ProcessGroupOpenReg(dist.ProcessGroup):
    """c10d group for openreg (and CPU) tensors over an inner gloo group.

    See Note [openreg collectives over gloo] and Note [Stream-ordered collectives]. Its collectives are
    the methods made from the tables of _collectives.py; every one goes through ``_run``.
    """

    def __init__(self, store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]
        self._gloo = _Gloo(store, rank, size, timeout, self)
        # c10d keeps a group's name on its backends ("ProcessGroup name not set" without one).
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self._gloo)
        self._transport = self._gloo  # what runs the collectives whose data moves (gloo's methods)
        self._init_state(store, timeout)

    def _init_state(self, store, timeout: timedelta) -> None:
        self._store = store
        self._timeout = timeout
        self._splits = 0
        # Within a coalescing bracket, the last Work issued (see _end_coalescing); outside one no Work
        # is kept, so nothing holds a collective's tensors once the program drops its Work.
        self._coalescing = False
        self._coalesced_work: dist.Work | None = None
        self._queue = _CommQueue(f"pg{id(self):x}")
        self._virtual_on: bool | None = None  # a device profile is set (read at the first collective)
        self._clock: _clock._Clock | None = None
        self._estimate_us: float | None = None  # summing modelled times (_time_estimator), or None

    def getBackendName(self) -> str:  # noqa: N802 - c10d's name
        return BACKEND_NAME

    def set_timeout(self, timeout: timedelta) -> None:
        """The timeout of the operations that follow: gloo's, and the bound on draining the queue at
        shutdown (Note [torch.distributed.set_timeout on torch 2.13])."""
        super().set_timeout(timeout)
        self._timeout = timeout

    def get_group_store(self):
        # c10d records it for split groups; the C++ base has none (a Python subclass cannot pass one).
        return self._store

    def _get_backend(self, device):
        # c10d asks the backend of a device for its capabilities (splitting, sequence numbers) and
        # eager connection; gloo's answers are ours. Collectives never go through it: c10d calls the
        # group's methods (_collectives.py), which queue them (Note [Stream-ordered collectives]).
        return self._gloo

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None, device_types=None):
        """c10d's split hook (``dist.split_group``): a new openreg group of the parent ranks ``ranks``,
        over a new gloo group that rendezvouses in the parent's store; None on ranks outside it
        (Note [split_group on openreg] in _gloo.py).

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
        self._coalescing, self._coalesced_work = True, None

    def _end_coalescing(self, device):
        work, self._coalesced_work = self._coalesced_work, None
        self._coalescing = False
        return work

    def shutdown(self) -> None:
        # Pending collectives end first (each bounded by gloo's timeout), then c10d shuts gloo down.
        self._queue.close(self._timeout.total_seconds())
        if self._clock is not None:
            self._clock.shutdown()
        super().shutdown()

    def _virtual(self) -> bool:
        if self._virtual_on is None:
            self._virtual_on = _clock.enabled()
        return self._virtual_on

    def _clock_of(self) -> _clock._Clock:
        """The group's clock, made at its first device collective (every rank makes it there)."""
        if self._clock is None:
            self._clock = _clock._Clock(self, self._store, self._timeout)
        return self._clock

    def _describe(self) -> str:
        """The group as a failure names it: c10d's name and, when set, its description."""
        try:
            name, desc = self.group_name, self.group_desc
        except RuntimeError:  # not registered with c10d (yet): no name to give
            return ""
        if not name:
            return ""
        return f"group {name} ({desc})" if desc and desc != "undefined" else f"group {name}"

    def _place(self, job: _Job, calls) -> None:
        """Gives a device collective its virtual span (Note [Collectives on the virtual clock]). A failed
        exchange of times fails the collective here, at the call, as the communication thread would."""
        try:
            self._place_on_clock(job, calls)
        except _clock.ExchangeFailed as err:
            job._finish(err)  # its end fails too: nothing can wait on it forever
            assert job.error is not None
            raise job.error from err

    def _place_on_clock(self, job: _Job, calls) -> None:
        end = job.end
        assert end is not None  # a device collective always has one
        name, args, _ = calls[0]
        kind = _clock.KINDS.get(name)
        if kind is None:
            return  # recv_anysource: its sender is unknown until it arrives
        clock = self._clock_of()
        nbytes = _clock.payload_bytes(calls)
        if kind == "send_recv":
            peer = int(args[1])
            if name == "send":
                end.place(*clock.send(peer, nbytes, job.reach_ns))
            else:
                posted = clock.post_recv(peer)

                def resolve() -> None:
                    try:
                        span = clock.recv_span(posted, peer, nbytes, job.reach_ns)
                    except _clock.ExchangeFailed as err:
                        raise job.failure(err) from err  # the job may have ended: only its waiter hears
                    end.place(*span)

                job.defer_span(resolve)
            return
        opts = args[-1] if args else None
        root = int(getattr(opts, "rootRank", -1)) if opts is not None else -1
        end.place(*clock.collective(job.op, kind, nbytes, job.reach_ns, root))

    def barrier(self, opts=None):
        """c10d's barrier. With a device profile, as NCCL's: an all_reduce of one element on the
        barrier's openreg device, and the host waits for its end, so every rank's host clock leaves
        the barrier at the same virtual time (Note [Collectives on the virtual clock]). Otherwise
        gloo's barrier."""
        if self._virtual():
            device = getattr(opts, "device", None)
            if device is None or device.type != BACKEND_NAME:
                # c10d picks the CPU for a group that also serves CPU tensors (ours does, through
                # gloo); NCCL's group barriers on its device: the bound one, else the current one.
                device = self.bound_device_id or torch.device(BACKEND_NAME, _om().current_device())
            flag = torch.zeros(1, device=device)
            work = self._run("barrier", [("allreduce", ([flag], dist.AllreduceOptions()), None)])
            return _BarrierWork(work)
        return self._run("barrier", [("barrier", () if opts is None else (opts,), None)])

    # torch.distributed._time_estimator asks the group's backend (_Gloo) for these.
    def _start_time_estimate(self) -> None:
        self._estimate_us = 0.0

    def _end_time_estimate(self) -> float:
        total, self._estimate_us = self._estimate_us, None
        return float(total or 0.0)

    def _sparse_allreduce(self, tensors: list[torch.Tensor], opts) -> dist.Work:
        """An all_reduce of sparse COO tensors (DistributedDataParallel's sparse gradients): gloo's sparse
        all_reduce on host copies, then the sum copied back into each openreg tensor, on the calling
        thread (the host copies wait for the stream; the copies back queue on it). Synchronous, like the
        sparse ops that must read the data (Note [Sparse COO on openreg]), and outside the virtual clock."""
        host = [t.cpu() for t in tensors]
        work = self._transport.allreduce(host, opts)  # type: ignore[attr-defined]
        if work is not None:
            work.wait()
        for t, h in zip(tensors, host):
            t.copy_(h)
        done = _Job("allreduce", None, [], None, None)
        done._finish(None)
        return _HostWork(done, tensors)

    def _run(self, op: str, calls):
        """The one path of every collective: checks the arguments of gloo's ``calls``
        [(gloo name, args, kwargs)] here, then queues one job that runs them in order."""
        for gloo_name, args, kwargs in calls:
            check = _collectives.CHECKS.get(gloo_name)
            if check is not None:
                check(self, *args, **(kwargs or {}))
        if op == "allreduce" and len(calls) == 1:
            tensors = _flatten(calls[0][1][0])
            if any(t.is_sparse and t.device.type == BACKEND_NAME for t in tensors):
                opts = calls[0][1][1] if len(calls[0][1]) > 1 else dist.AllreduceOptions()
                return self._sparse_allreduce(tensors, opts)
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
            launches.append(lambda g=gloo_name, a=mapped, k=mapped_kwargs: getattr(self._transport, g)(*a, **k))

        def post():
            for views, scale in post_views:
                _apply_scale(views, scale)

        virtual = conv.device is not None and self._virtual()
        if virtual and self._estimate_us is not None:
            # _time_estimator: nothing runs; the modelled time adds up (Note [Collectives on the virtual clock]).
            self._estimate_us += self._clock_of().estimate_us(calls)
            done = _Job(op, None, [], None, None)
            done._finish(None)
            return _HostWork(done, outputs)
        in_flight = conv.keep  # the openreg tensors the collective reads or writes
        if virtual and _clock.timing_only():
            moves = _moves_in_timing_only(calls)
            if calls[0][0] != "send":
                # What it writes holds values when its data moves and what this rank gives holds values
                # (Note [Values in timing-only execution] in sim/src/stream.cpp): decided here, in issue
                # order, as the streams' work is. A small loss reduced from values never computed would
                # otherwise move a block's stale bytes and read back as them.
                from torch_openreg import _C  # imported here: registration must not load the extension

                given = [t for t in _given(calls, self.rank()) if t.device.type == BACKEND_NAME]
                _C._set_holds_values([t for t in outputs if t.device.type == BACKEND_NAME],
                                     moves and _C._holds_values(given))
            if not moves:
                # Timing-only execution: no data moves, so the collective uses none of their memory, and
                # the allocator may reuse a block the program frees at once, without waiting for the
                # communication thread to reach the job's end (which is real time, not the program's).
                launches, post_views, in_flight = [], [], []
        stream = _stream_args(_om().current_stream(conv.device)) if conv.device is not None else None
        job = _Job(op, conv.device, launches, post if post_views else None, stream, group=self._describe())
        # Held by the allocator until the collective ends, not by the job: their bytes leave the
        # allocated count when the program frees them, as CUDA's record_stream frees do (Note
        # [Stream-ordered collectives]). A job with openreg tensors has an end.
        for t in in_flight:
            assert job.end is not None
            job.end.hold(t)
        if virtual:
            self._place(job, calls)  # before the job is shared: the span is fixed first
        _om().sanitizer._collective(job, calls)  # torch.openreg.sanitizer: one call per collective
        self._queue.submit(job)
        work: dist.Work
        if conv.device is None:
            work = _HostWork(job, outputs)
        else:
            work = _DeviceWork(job, [t for t in outputs if t.device.type == BACKEND_NAME])
        if self._coalescing:
            self._coalesced_work = work
        return work


# gloo's collectives whose size is the same on every rank of the group (send and recv: on both sides
# of the pair), so every rank takes the same decision below; gather, scatter and all_to_all are not.
_SAME_SIZE_ON_EVERY_RANK = frozenset(
    {"allreduce", "allreduce_coalesced", "broadcast", "reduce", "allgather", "_allgather_base",
     "allgather_coalesced", "reduce_scatter", "_reduce_scatter_base", "send", "recv"}
)


def _given(calls, rank: int) -> list[torch.Tensor]:
    """The tensors whose values this rank gives to the collective ``calls`` (gloo names and arguments):
    an all_reduce's buffer, an all_gather's or reduce_scatter's input, a broadcast's buffer on its
    root; nothing for a receive."""
    given: list[torch.Tensor] = []
    for name, args, _ in calls:
        if name in ("allreduce", "allreduce_coalesced", "reduce"):
            given.extend(_flatten(args[0]))
        elif name == "broadcast" and int(args[-1].rootRank) == rank:
            given.extend(_flatten(args[0]))
        elif name in ("allgather", "_allgather_base", "allgather_coalesced", "reduce_scatter",
                      "_reduce_scatter_base"):
            given.extend(_flatten(args[1]))
    return given


def _moves_in_timing_only(calls) -> bool:
    """Whether a device collective still moves its data in timing-only execution: control data (DDP's
    parameter counts and shapes, its bucket assignment) is small and comes from the host, so a
    collective of at most the sim's moved-bytes bound runs on gloo as in compute mode (Note [Control
    data in timing-only execution] in sim/src/stream.cpp). recv_anysource always runs: its sender is
    only known once data arrives."""
    if calls[0][0] == "recv_anysource":
        return True
    if any(name not in _SAME_SIZE_ON_EVERY_RANK for name, _, _ in calls):
        return False
    from torch_openreg import _C  # imported here: registration must not load the extension

    return _clock.payload_bytes(calls) <= _C._timing_only_moved_bytes()


_collectives.install(ProcessGroupOpenReg)
