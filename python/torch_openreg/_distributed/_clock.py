"""A group's collectives on the virtual clock: when each starts and ends on the modelled GPUs.

Note [Collectives on the virtual clock]
With a device profile (Note [Virtual time] in sim/src/virtual_clock.cpp) a collective on openreg tensors
gets a virtual span, decided at the call, on the calling thread, before the Work is handed back:
- Each rank's stream reaches the collective at a virtual time known at the call (its issue marker,
  ``CollectiveEvent.issue_on``). The ranks exchange these times: a small allgather on a gloo group of
  their own (``_Clock``; created at the group's first device collective, so a CPU-only program never
  makes one), in the group's call order, which c10d requires to be the same on every rank. The
  collective starts at the latest rank's time, or when the group's previous collective ended
  (NCCL runs a communicator's collectives one after another on its stream), and lasts the cost model's
  time for its kind, size and the ranks' nodes (Note [Collective cost model] in sim/src/cost_model.cpp).
  Every rank computes the same span from the same numbers, so it ends at the same virtual time on
  every rank. Virtual time 0 is each process's runtime start: the ranks are modelled as starting
  together, so their clocks agree across processes and hosts.
- The span is placed (``CollectiveEvent.place``) before anything can wait on the collective: streams
  that wait continue at its end, the host that synchronizes jumps there, kernels issued afterwards
  over it are slowed by the profile's comm_compute_slowdown, and the device counts it as
  communication (its exposed part too). As the span is fixed at the call, the timeline depends only on
  the program's calls: the same on every run.
- The price: the call waits (in real time, not virtual) until every rank of the group has made the
  same call, as a gloo collective would. A program whose ranks make a collective only after hearing
  from another rank outside the group's collectives (a store key set after a collective's wait) would
  deadlock; none of PyTorch's wrappers (DDP, FSDP, DTensor, DeviceMesh) do.
- send/recv: a send's rank sends its time to the receiver (non-blocking) and its span starts at once;
  a recv's span starts when both have reached it, resolved when its Work is first waited on (a recv
  waiting at the call would deadlock a batch that posts recvs before sends).
- barrier: as NCCL's, an all_reduce of one element on the group's device (the bound one, else the
  current one; c10d would pick the CPU for our group, which also serves CPU tensors) that the host
  waits for, so every rank's host clock leaves the barrier at the same virtual time.
- Ordering check: with the times each rank sends its collective's kind; ranks that disagree get a
  RuntimeError at the call naming both (gloo finds this only later, or, in timing-only execution where
  no data moves, never).
- A failed exchange (a dead peer, gloo's timeout) fails the collective at the call, worded as a failure
  on the communication thread is ("openreg distributed <op> on openreg:N in group ... failed: <gloo's
  error>", Note [Stream-ordered collectives] in _comm_queue.py): in timing-only execution the exchange
  is the only transfer, so it is where a dead peer shows.
- Timing-only execution (``OPENREG_EXECUTE=timing``): collectives on openreg tensors move no data and
  make no gloo transfer; only the exchange of times runs. Their outputs stay as they are (zeros).
- ``torch.distributed._time_estimator``: between ``_start_time_estimate`` and ``_end_time_estimate``
  the group runs nothing and sums the modelled times of the collectives called, in microseconds (as
  NCCL's simulated group reports).
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ._device import _flatten

# gloo's method -> the cost model's kind (None: not a device collective on the clock).
KINDS: dict[str, str] = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "allgather": "all_gather",
    "_allgather_base": "all_gather",
    "allgather_coalesced": "all_gather",
    "gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "scatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
    "send": "send_recv",
    "recv": "send_recv",
}
_KIND_CODES = {kind: i + 1 for i, kind in enumerate(sorted(set(KINDS.values())))}
_KIND_NAMES = {code: kind for kind, code in _KIND_CODES.items()}


class ExchangeFailed(RuntimeError):
    """The ranks' exchange of virtual times failed (a dead peer, gloo's timeout): the collective that
    made it fails with this, named as a failure on the communication thread names it (_Job.failure in
    _comm_queue.py). Its text is gloo's; gloo's own error is its cause."""


def enabled() -> bool:
    """Whether a device profile is set (collectives then take virtual time)."""
    from torch_openreg import _C  # imported here: registration must not load the extension

    return _C._device_profile() is not None


def timing_only() -> bool:
    from torch_openreg import _C

    return _C._timing_only()


def payload_bytes(calls) -> int:
    """A collective's size as nccl-tests counts it: its larger side (outputs are the first argument,
    inputs the second), summed over the job's calls."""
    total = 0
    for _, args, _ in calls:
        sides = [sum(t.numel() * t.element_size() for t in _flatten(a)) for a in args[:2]]
        total += max(sides, default=0)
    return total


def ranks_per_node() -> int:
    """GPUs per node: OPENREG_RANKS_PER_NODE, else torchrun's LOCAL_WORLD_SIZE, else the profile's."""
    for var in ("OPENREG_RANKS_PER_NODE", "LOCAL_WORLD_SIZE"):
        # As every OPENREG_ variable: spaces around the value do not matter and empty is unset. Only ASCII
        # digits count: str.isdigit() also accepts "²" and "٨", which int() refuses or reads unexpectedly.
        value = os.environ.get(var, "").strip()
        if not value:
            continue
        if not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise RuntimeError(f"{var}='{value}' is invalid: expected a whole number of ranks per node >= 1")
        return int(value)
    from torch_openreg import _C

    profile = _C._device_profile()
    return int(profile["ranks_per_node"]) if profile else 1


class _Clock:
    """One group's place on the virtual clock (Note [Collectives on the virtual clock]). Used on the
    threads that call the group's collectives, one call at a time (c10d's contract), under a lock."""

    def __init__(self, group: dist.ProcessGroup, store, timeout: timedelta) -> None:
        rank, size = group.rank(), group.size()
        self._rank = rank
        self._size = size
        # on the group's own transport device (Note [Which address gloo listens on] in _address.py)
        opts = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
        opts._devices = list(group._gloo.options._devices)  # type: ignore[attr-defined]
        opts._timeout = timeout
        opts._threads = 2
        try:
            self._gloo: Any = dist.ProcessGroupGloo(dist.PrefixStore("openreg-clock/", store), rank, size, opts)
        except RuntimeError as err:  # a rank that never comes: the store's timeout
            raise ExchangeFailed(str(err)) from err
        self._lock = threading.Lock()
        self._lane_free = 0  # virtual end of the group's last collective (the same on every rank)
        self._sends: list[Any] = []  # gloo sends of our times still in flight (kept alive until done)
        try:
            members = dist.get_process_group_ranks(group)
        except (RuntimeError, ValueError, KeyError):
            members = list(range(size))  # not registered with c10d yet: its own ranks
        per_node = ranks_per_node()
        self._node_of = [r // per_node for r in members]
        self.nodes = len(set(self._node_of))

    def _cost_ns(self, kind: str, nbytes: int, ranks: int, nodes: int) -> int:
        from torch_openreg import _C

        estimate = _C._modelled_collective(kind, float(nbytes), ranks, nodes)
        if estimate is None:  # a clock is made only with a profile (enabled())
            raise RuntimeError("openreg: collectives on the virtual clock need a device profile "
                               "(OPENREG_DEVICE_PROFILE)")
        ns, _ = estimate
        return round(ns)

    def collective(self, op: str, kind: str, nbytes: int, reach_ns: int, root: int) -> tuple[int, int]:
        """The span of a collective of the whole group: agreed with every rank, after the previous one."""
        with self._lock:
            mine = torch.tensor([reach_ns, _KIND_CODES[kind], root, nbytes], dtype=torch.int64)
            gathered = torch.empty(self._size * 4, dtype=torch.int64)
            try:
                self._gloo._allgather_base(gathered, mine).wait()
            except RuntimeError as err:  # a dead peer ("Connection closed by peer"), gloo's timeout
                raise ExchangeFailed(str(err)) from err
            rows = gathered.view(self._size, 4).tolist()
            for r, (_, code, their_root, _) in enumerate(rows):
                if code != mine[1] or their_root != root:
                    raise RuntimeError(
                        f"openreg distributed {op}: ranks called different collectives: rank {self._rank} "
                        f"called {kind} (root {root}), rank {r} called {_KIND_NAMES.get(code, '?')} "
                        f"(root {their_root}); every rank must call the group's collectives in the same order"
                    )
            # The largest size any rank gave (all_to_all's may differ between ranks).
            size = max(row[3] for row in rows)
            start = max(max(row[0] for row in rows), self._lane_free)
            end = start + self._cost_ns(kind, size, self._size, self.nodes)
            self._lane_free = end
            return start, end

    def send(self, peer: int, nbytes: int, reach_ns: int) -> tuple[int, int]:
        """A send's span (it starts when its own stream reaches it); tells the receiver its time."""
        with self._lock:
            self._sends = [w for w in self._sends if not w.is_completed()]
            try:
                self._sends.append(self._gloo.send([torch.tensor([reach_ns], dtype=torch.int64)], peer, 0))
            except RuntimeError as err:
                raise ExchangeFailed(str(err)) from err
            return reach_ns, reach_ns + self._p2p_ns(peer, nbytes)

    def post_recv(self, peer: int):
        """Posts the receipt of a sender's time; ``recv_span`` reads it."""
        with self._lock:
            buf = torch.empty(1, dtype=torch.int64)
            try:
                return buf, self._gloo.recv([buf], peer, 0)
            except RuntimeError as err:
                raise ExchangeFailed(str(err)) from err

    def recv_span(self, posted, peer: int, nbytes: int, reach_ns: int) -> tuple[int, int]:
        buf, work = posted
        try:
            work.wait()
        except RuntimeError as err:
            raise ExchangeFailed(str(err)) from err
        start = max(int(buf[0]), reach_ns)
        return start, start + self._p2p_ns(peer, nbytes)

    def _p2p_ns(self, peer: int, nbytes: int) -> int:
        nodes = 1 if self._node_of[peer] == self._node_of[self._rank] else 2
        return self._cost_ns("send_recv", nbytes, 2, nodes)

    def estimate_us(self, calls) -> float:
        """The modelled time of one job's collectives (``_time_estimator``), in microseconds."""
        kind = KINDS.get(calls[0][0])
        if kind is None:
            return 0.0
        if kind == "send_recv":
            peer = int(calls[0][1][1])
            return self._p2p_ns(peer, payload_bytes(calls)) / 1e3
        return self._cost_ns(kind, payload_bytes(calls), self._size, self.nodes) / 1e3

    def shutdown(self) -> None:
        self._gloo.shutdown()
