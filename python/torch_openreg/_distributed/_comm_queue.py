"""A group's communication queue: each collective is a job, issued to gloo and ended by the group's two
communication threads.

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
  (its events are recorded on a side stream that waits on the end), for DDP comm hooks (_work.py).
- A failed collective (gloo's timeout naming the operation, a dead peer) fails the end record with
  "openreg distributed <op> on openreg:N in group <name> (<desc>) failed: ...": every stream that
  waited on it reports it at its next synchronize, like a failed kernel, and Work.wait() raises it if
  it is already known. (With a device profile the exchange of virtual times can find a dead peer
  first, at the call: it raises the same error there; Note [Collectives on the virtual clock].)
- Openreg tensors in flight are held by the allocator, not by the job: each block is marked with the
  collective's end (CollectiveEvent.hold), and a block the program frees meanwhile leaves the allocated
  count at once but is reused only after that end, as a block recorded on NCCL's stream is on CUDA
  (record_stream). Holding the tensors until the communication thread ended the job made the peak
  allocated memory depend on how far that thread had got in real time (it differed between runs of
  one job). CPU tensors in flight stay alive through the job's gloo calls, which hold them.
- barrier() and collectives on CPU tensors only go through the same queue (ordering), and their Work's
  wait() blocks the host until they have ended (gloo's behaviour, and NCCL's barrier).
- The GIL: device threads never take it. The communication threads take it only to hand a collective
  to gloo, to scale AVG / PREMUL_SUM results and to complete the end (briefly); their waits (the start
  event, gloo's Work) release it. So a host thread must not block on the device while holding the GIL
  with a collective pending on that device: torch's ops, synchronize, Stream/Event waits all release
  it; storage.resize_(0) (FSDP2's free) used to synchronize the device with the GIL held, and now frees
  stream-ordered instead, as CUDA does (backend/ops/Resize.cpp).
- Bad arguments raise at the call, on the caller's thread, before anything is queued (Note [Argument
  checks at the call] in _checks.py). What gloo still finds (anything those checks miss) surfaces as a
  failed collective at the waiting stream's next synchronize.
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING

from ._device import _comm_lane

if TYPE_CHECKING:
    from torch_openreg._C import _CollectiveEvent


class _Job:
    """One collective queued on a group's communication thread (Note [Stream-ordered collectives])."""

    def __init__(self, op: str, device, launches, post, stream, group: str = "") -> None:
        self.op = op
        self.device = device
        self.group = group  # how a failure names the group ("group 0 (default_pg)"), or ""
        self._launches = launches  # callables issuing gloo collectives on CPU views; each returns a Work
        self._post = post  # runs on the CPU views after gloo (AVG / PREMUL_SUM scaling), or None
        self.end: _CollectiveEvent | None = None
        self.reach_ns = -1  # virtual time at which the issuing stream reaches it (-1: no profile)
        self._issued = False
        if device is not None:
            from torch_openreg import _C  # imported here: registration must not load the extension

            self.end = _C._CollectiveEvent(device.index)
            # The device timeline shows the collective on the device's communication lane.
            self.end.set_trace(f"collective:{op}", _comm_lane(device))
            if stream is not None:
                # It starts after the work queued on the issuing stream so far.
                self.reach_ns = self.end.issue_on(*stream)
                self._issued = True
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.gloo_works: list = []
        # A recv's virtual span, resolved at its first wait (Note [Collectives on the virtual clock]).
        self._resolve = None
        self._resolve_lock = threading.Lock()
        self._resolve_error: BaseException | None = None  # what resolve() raised, for every later caller

    def defer_span(self, resolve) -> None:
        """``resolve()`` places the collective on the virtual clock; run by the first waiter."""
        self._resolve = resolve

    def resolve_span(self) -> None:
        """Runs ``resolve()`` once, on whichever thread comes first (the waiter or the completing thread);
        if it failed, every caller raises its error. A waiter that found the completing thread resolving
        used to return once it had finished, before the job's error was set, and go on as if the recv had
        succeeded: a ring that would hang on NCCL then exited 0 when nothing synchronized afterwards."""
        with self._resolve_lock:
            resolve, self._resolve = self._resolve, None
            if resolve is not None:
                try:
                    resolve()
                except BaseException as err:
                    self._resolve_error = err
                    raise
            elif self._resolve_error is not None:
                raise self._resolve_error

    def issue(self) -> bool:
        """Waits for the work queued before the collective, then hands it to gloo (which runs it on its
        own threads). False if it failed already."""
        try:
            if self._issued:
                assert self.end is not None  # issued on a stream: a device collective
                try:
                    self.end.wait_issued()  # releases the GIL while it waits
                except RuntimeError:
                    # A kernel before the collective failed: its stream keeps reporting that. The
                    # collective still runs, so the peers are not left waiting (NCCL runs it too).
                    pass
                self._issued = False
            if self.end is not None:
                self.end.mark_started()
            self.gloo_works = [launch() for launch in self._launches]
            return True
        except BaseException as err:  # noqa: BLE001 - handed to whoever waits on the collective
            self._finish(err)
            return False

    def complete(self) -> None:
        """Places a recv's span if no waiter has yet, waits for gloo (bounded by its timeout), scales AVG /
        PREMUL_SUM results, ends the job."""
        try:
            # The end is placed on the virtual clock before it completes: a record completed unplaced
            # takes the completing thread's time, which is not the modelled one. A recv whose Work nobody
            # waited on yet (a pipeline schedule waits for a microbatch's recv only when it gets to it)
            # used to end so, with a span seconds late, on some runs. The sender's time comes at its
            # call, so this wait does not depend on anything queued behind this job.
            self.resolve_span()
            for w in self.gloo_works:
                if w is not None:
                    w.wait()  # releases the GIL
            if self._post is not None:
                self._post()
        except BaseException as err:  # noqa: BLE001 - handed to whoever waits on the collective
            self._finish(err)
        else:
            self._finish(None)

    def failure(self, err: BaseException) -> RuntimeError:
        """``err`` (gloo's, often only "Connection closed by peer") as the error of this collective:
        the one wording of a failed collective, whichever thread found it."""
        where = f" on {self.device}" if self.device is not None else ""
        group = f" in {self.group}" if self.group else ""
        error = RuntimeError(f"openreg distributed {self.op}{where}{group} failed: {err}")
        error.__cause__ = err
        return error

    def _finish(self, err) -> None:
        if err is not None:
            self.error = self.failure(err)
        self._issued = False
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
