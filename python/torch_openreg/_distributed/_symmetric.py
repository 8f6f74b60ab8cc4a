"""Symmetric-rank mode: one process stands in for every rank of its role (issue 41).

Note [Symmetric-rank mode]
A data-, tensor- or context-parallel job of N ranks is N copies of one program that differ only in
their rank: each rank issues the same ops on the same shapes at the same virtual times. Only ranks that
play a different role differ: the stages of a pipeline. So a job of N ranks runs as one process per
role (``python -m torch_openreg.symmetric``), each standing in for all ranks of its role:
- **Layout** (``Layout``): the job's mesh (dims, sizes, names; one dim of N ranks when none is given)
  and the dims whose coordinate makes a role (``vary``, e.g. "pp"). A rank's role is its coordinates
  along those dims; the role's stand-in is the rank with those coordinates and 0 along every other dim.
  Choosing stand-ins that way ("aligned") means that every group containing a stand-in contains the
  stand-ins of every role its members play: a group along a varied dim is made of stand-ins, a group
  along any other dim holds one role. The launcher states the layout in the environment
  (``OPENREG_SYMMETRIC``); each process's ``RANK`` is its stand-in's rank and ``WORLD_SIZE`` is N.
- **Groups**: every group a stand-in belongs to is a ``SymmetricProcessGroup`` of its full size (c10d
  asks only members to make one, as on a GPU; DeviceMesh makes its sub-meshes' groups with
  ``new_group``), so every rank and size API answers as for the represented rank.
- **Time**: a collective starts when the last of its ranks reaches it. The ranks of one role reach it
  together (that is the assumption), so with one role in the group the stand-in's own time is the
  group's; with several, the stand-ins of the roles in the group exchange their times, kinds and
  sizes (a small gloo group of those stand-ins only). It then lasts the cost model's time for the
  group's full size and nodes (Note [Collective cost model] in sim/src/cost_model.cpp): the same
  arithmetic as the group of N processes (Note [Collectives on the virtual clock] in _clock.py), so
  a symmetric job gives the same per-rank timeline to the nanosecond.
- **Data**: none moves (timing-only execution is required), except control data, which moves in
  timing-only execution too (Note [Values in timing-only execution] in sim/src/stream.cpp): it
  is composed as if every rank had given its stand-in's value (an all_reduce's sum is the sum over
  roles of a stand-in's value times its role's rank count; an all_gather repeats each role's value
  for each of its ranks), exchanged between stand-ins where the group holds several roles.
- **Honesty checks**: what openreg can see of the assumption is checked, and a break is an error at
  the call naming it, never a silently wrong size: stand-ins of one group must call the same
  collectives with the same sizes (all_to_all's may differ) and roots; a send to another role must go
  to a rank whose stand-in receives it with the same size from this role's stand-in; context
  parallelism's causal ring attention over a group of one role is refused (each of its ranks does
  other work at each step: ``_refuse_causal_ring_attention_over_one_role``).
- **Witnesses** (``--check``): what no stand-in can see is whether the other ranks of its role do what
  it does (ring attention's load balancing gives each rank of a cp dim other shapes; a program may
  branch on its rank). So the launcher can run a second job beside the first, of each role's witness:
  the role's rank at the far corner of the other dims (``Layout.corner``: its own store and exchanges,
  aligned as the stand-ins are). Each process records every collective and send/recv (op, kind,
  bytes, group size, nodes, group description, virtual span) and its peak allocated memory
  (``_Timeline``); after both jobs end, the launcher compares each stand-in with its witness and names
  the first point where they differ (``compare_witness``). It doubles the processes, so it is asked for.
- **Sends within a role** (a ring): by symmetry the rank d before the stand-in sends to it what the
  stand-in sends to the rank d after it, at the same virtual time, so the stand-in's own send to +d
  stands for the one its receive from -d gets (``_Mirror``: the time on the clock, the data where it
  moves). Each link is timed as the stand-in's (its receive from -d crosses a node boundary where that
  rank's does). A receive whose mirrored send never comes within the group's timeout is an error
  naming it.
- **Memory**: each stand-in has its rank's devices, so its peak memory is the rank's, and an
  allocation its GPU would fail raises ``torch.OutOfMemoryError`` in its process; the launcher names the
  role and its ranks of a process that fails.
"""

from __future__ import annotations

import atexit
import collections
import functools
import inspect
import json
import math
import os
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from . import _clock
from ._group import ProcessGroupOpenReg

ENV = "OPENREG_SYMMETRIC"
LOG_ENV = "OPENREG_SYMMETRIC_LOG"  # a folder: each process writes its timeline there at exit (--check)


@dataclass(frozen=True)
class Layout:
    """The job's ranks: a row-major mesh of ``shape`` named ``names``; ranks differ in role along ``vary``."""

    shape: tuple[int, ...]
    names: tuple[str, ...]
    vary: tuple[str, ...] = ()
    per_node: int = 8
    corner: bool = False  # stand-ins at the far corner (the last coordinate along every other dim): witnesses

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.names) or not self.shape or any(s < 1 for s in self.shape):
            raise ValueError(f"symmetric-rank mode: invalid mesh {self.describe_mesh()}")
        unknown = [d for d in self.vary if d not in self.names]
        if unknown:
            raise ValueError(f"symmetric-rank mode: --vary names {unknown}, which the mesh "
                             f"{self.describe_mesh()} does not have")
        if self.per_node < 1:
            raise ValueError(f"symmetric-rank mode: ranks per node must be >= 1, got {self.per_node}")

    @property
    def world(self) -> int:
        return math.prod(self.shape)

    def describe_mesh(self) -> str:
        return ",".join(f"{n}={s}" for n, s in zip(self.names, self.shape))

    def coords(self, rank: int) -> tuple[int, ...]:
        out = []
        for size in reversed(self.shape):
            out.append(rank % size)
            rank //= size
        return tuple(reversed(out))

    def rank_at(self, coords) -> int:
        rank = 0
        for c, size in zip(coords, self.shape):
            rank = rank * size + c
        return rank

    def role_of(self, rank: int) -> tuple[int, ...]:
        """A rank's role: its coordinates along the varied dims (() when every rank has one role)."""
        c = self.coords(rank)
        return tuple(c[self.names.index(d)] for d in self.vary)

    def stand_in(self, role: tuple[int, ...]) -> int:
        """The rank that stands in for ``role``: its coordinates, 0 along every other dim (the last
        coordinate with ``corner``: the role's witness)."""
        coords = [s - 1 for s in self.shape] if self.corner else [0] * len(self.shape)
        for d, c in zip(self.vary, role):
            coords[self.names.index(d)] = c
        return self.rank_at(coords)

    def roles(self) -> list[tuple[int, ...]]:
        sizes = [self.shape[self.names.index(d)] for d in self.vary]
        out: list[tuple[int, ...]] = [()]
        for s in sizes:
            out = [r + (c,) for r in out for c in range(s)]
        return out

    def stand_ins(self) -> list[int]:
        return sorted(self.stand_in(r) for r in self.roles())

    def describe_role(self, role: tuple[int, ...]) -> str:
        """"role pp=1 (ranks 16..31 of 64, 16 ranks)" or "the one role (all 64 ranks)"."""
        if not self.vary:
            return f"the one role (all {self.world} ranks)"
        count = self.world // math.prod(self.shape[self.names.index(d)] for d in self.vary)
        ranks = [r for r in range(self.world) if self.role_of(r) == role] if self.world <= 1 << 16 else []
        span = _ranges(ranks)
        named = ",".join(f"{d}={c}" for d, c in zip(self.vary, role))
        return f"role {named} (ranks {span} of {self.world}: {count} ranks)"

    def to_env(self) -> str:
        return json.dumps({"shape": list(self.shape), "names": list(self.names), "vary": list(self.vary),
                           "per_node": self.per_node, "corner": self.corner})

    @classmethod
    def from_env(cls, text: str) -> Layout:
        try:
            d = json.loads(text)
            return cls(tuple(int(s) for s in d["shape"]), tuple(str(n) for n in d["names"]),
                       tuple(str(v) for v in d.get("vary", ())), int(d.get("per_node", 8)),
                       bool(d.get("corner", False)))
        except (ValueError, KeyError, TypeError) as err:
            raise RuntimeError(f"{ENV}='{text}' is invalid (it is set by python -m torch_openreg.symmetric): "
                               f"{err}") from err


def _ranges(ranks: list[int]) -> str:
    """[0,1,2,3,8,9] -> "0..3,8..9" (at most 4 ranges, then "...")."""
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}..{ranks[j]}")
        i = j + 1
    return ",".join(parts[:4]) + (",..." if len(parts) > 4 else "")


_layout: Layout | None = None
_layout_read = False


def layout() -> Layout | None:
    """The job's layout in symmetric-rank mode (``OPENREG_SYMMETRIC``), else None."""
    global _layout, _layout_read
    if not _layout_read:
        text = os.environ.get(ENV, "").strip()
        _layout = Layout.from_env(text) if text else None
        _layout_read = True
    return _layout


class SymmetryBroken(RuntimeError):
    """The program did something that makes the ranks a stand-in represents differ from it."""


def _broken(what: str) -> SymmetryBroken:
    return SymmetryBroken(f"openreg symmetric-rank mode: {what}. A stand-in process can only represent "
                          f"ranks that do what it does; run the job with its roles stated "
                          f"(python -m torch_openreg.symmetric --mesh ... --vary ...) or as processes")


class _Timeline:
    """What a process's rank was seen to do, for the launcher's comparison of a stand-in with its role's
    witness (``--check``, Note [Symmetric-rank mode]): every collective and send/recv as (start, end,
    op, kind, bytes, group size, nodes, group), and its devices' peak allocated memory, written to
    ``$OPENREG_SYMMETRIC_LOG/rank<R>.json`` when the process exits."""

    def __init__(self, folder: str) -> None:
        self._path = os.path.join(folder, f"rank{int(os.environ.get('RANK', '0'))}.json")
        self._entries: list[list] = []
        self._lock = threading.Lock()  # the calling thread places collectives, a waiter resolves a recv
        atexit.register(self._write)

    def add(self, start: int, end: int, op: str, kind: str, nbytes: int, group: SymmetricProcessGroup,
            nodes: int, what: str) -> None:
        with self._lock:
            self._entries.append([int(start), int(end), op, kind, int(nbytes), group.size(), nodes, what])

    def _write(self) -> None:
        om = getattr(torch, "openreg", None)
        peak = max((om.max_memory_allocated(d) for d in range(om.device_count())), default=0) if om else 0
        with self._lock, open(self._path, "w") as f:
            json.dump({"entries": sorted(self._entries), "peak_allocated": peak}, f)


@functools.cache
def _timeline() -> _Timeline | None:
    """The process's timeline when the launcher asked for one (``OPENREG_SYMMETRIC_LOG``), made once."""
    folder = os.environ.get(LOG_ENV, "").strip()
    return _Timeline(folder) if folder else None


def compare_witness(lay: Layout, stand_in: int, witness: int, mine: dict, theirs: dict) -> str | None:
    """None when a role's witness did what its stand-in did (the same collectives, sizes, groups and
    virtual spans, the same peak memory); else what differs, at the first point it does."""
    def who(rank: int) -> str:
        c = lay.coords(rank)
        dims = [i for i, n in enumerate(lay.names) if n not in lay.vary]
        return f"rank {rank} ({','.join(f'{lay.names[i]}={c[i]}' for i in dims)})"

    a, b = mine["entries"], theirs["entries"]
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b):
            short, other = (stand_in, witness) if i >= len(a) else (witness, stand_in)
            extra = (b if i >= len(a) else a)[i]
            return (f"{who(short)} made {i} collectives and sends where {who(other)} made more, the next "
                    f"being {_describe_entry(extra)}")
        if a[i][2:] != b[i][2:]:
            return (f"their {_ordinal(i + 1)} collective or send differs: {who(stand_in)} made "
                    f"{_describe_entry(a[i])}, {who(witness)} made {_describe_entry(b[i])}")
        if a[i][:2] != b[i][:2]:
            return (f"their {_ordinal(i + 1)} collective or send, {_describe_entry(a[i])}, runs from "
                    f"{a[i][0]} to {a[i][1]} ns on {who(stand_in)} but from {b[i][0]} to {b[i][1]} ns on "
                    f"{who(witness)} (virtual time): their work before it differs")
    if mine["peak_allocated"] != theirs["peak_allocated"]:
        return (f"{who(stand_in)}'s peak allocated memory is {mine['peak_allocated']} bytes, "
                f"{who(witness)}'s {theirs['peak_allocated']}")
    return None


def _describe_entry(e: list) -> str:
    _, _, op, kind, nbytes, size, nodes, what = e
    return f"{op} ({kind}) of {nbytes} bytes in a group of {size} ranks over {nodes} node(s){what}"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


class _Mirror:
    """What a stand-in sends to ranks of its own role, standing for what its receives from its own role
    get: by symmetry, the rank d before it sends to it what it sends to the rank d after it, at the
    same virtual time (Note [Symmetric-rank mode]). Per key (the offset d, and a tag for data), a FIFO
    of what was sent; a receive taken before its mirrored send was made waits for it, at most the
    group's timeout."""

    def __init__(self, timeout_s: float) -> None:
        self._cv = threading.Condition()
        self._queues: dict[Any, collections.deque] = collections.defaultdict(collections.deque)
        self._timeout_s = timeout_s

    def set_timeout(self, timeout_s: float) -> None:
        with self._cv:
            self._timeout_s = timeout_s

    def put(self, key, item) -> None:
        with self._cv:
            self._queues[key].append(item)
            self._cv.notify_all()

    def take(self, key, what: str):
        with self._cv:
            if not self._cv.wait_for(lambda: bool(self._queues[key]), self._timeout_s):
                raise _broken(what)
            return self._queues[key].popleft()


class _MirroredRecv:
    """A receive from a rank of the stand-in's own role, posted on the communication thread: done when
    the stand-in's mirrored send has given its data (``_Mirror``)."""

    def __init__(self, mirror: _Mirror, key, tensors: list[torch.Tensor], what: str) -> None:
        self._mirror, self._key, self._tensors, self._what = mirror, key, tensors, what

    def wait(self, timeout=None) -> bool:
        for t, v in zip(self._tensors, self._mirror.take(self._key, self._what)):
            t.copy_(v)
        return True


class _Exchange:
    """The stand-ins of one group's roles, as a small gloo group of their own (made at first need, by
    every one of them at the same call of the group: c10d's order). None when the group holds one role."""

    def __init__(self, group: SymmetricProcessGroup) -> None:
        lay = group._layout
        self.members = sorted({lay.stand_in(lay.role_of(g)) for g in group._global_ranks})
        missing = [s for s in self.members if s not in group._global_ranks]
        if missing:  # cannot happen with aligned stand-ins (Note [Symmetric-rank mode])
            raise _broken(f"group {group._describe()} holds roles whose stand-ins {missing} are not in it")
        self.rank = self.members.index(group._me)
        # Two gloo groups: the virtual times go over ``gloo`` from the calling thread, the data that
        # moves over ``data`` from the communication thread; one group used from both threads could
        # issue them in a different order on different stand-ins.
        self.gloo = self._gloo(group, "openreg-symmetric/time/")
        self.data = self._gloo(group, "openreg-symmetric/data/")

    def _gloo(self, group: SymmetricProcessGroup, prefix: str):
        opts = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
        # the stand-ins run on this machine (python -m torch_openreg.symmetric starts them)
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        opts._timeout = group._timeout
        return dist.ProcessGroupGloo(dist.PrefixStore(prefix, group._store), self.rank, len(self.members), opts)

    def allgather(self, row: list[int]) -> list[list[int]]:
        mine = torch.tensor(row, dtype=torch.int64)
        out = torch.empty(len(self.members) * len(row), dtype=torch.int64)
        try:
            self.gloo._allgather_base(out, mine).wait()
        except RuntimeError as err:
            raise _clock.ExchangeFailed(str(err)) from err
        return out.view(len(self.members), len(row)).tolist()

    def allgather_tensor(self, t: torch.Tensor) -> list[torch.Tensor]:
        outs = [torch.empty_like(t) for _ in self.members]
        self.data.allgather([outs], [t.contiguous()]).wait()
        return outs


@dataclass(frozen=True)
class _MirroredSpan:
    """A posted receive from a rank of the stand-in's own role: its sender's time is the stand-in's own
    send to the rank ``offset`` after it (``_Mirror``)."""

    offset: int


class _SymmetricClock(_clock._Clock):
    """A symmetric group's place on the virtual clock: ``_clock._Clock``'s arithmetic (its costs,
    send/recv's nodes, the time estimator), with the represented ranks' times taken to be their
    stand-ins' and exchanged only between stand-ins of different roles (Note [Symmetric-rank mode])."""

    def __init__(self, group: SymmetricProcessGroup) -> None:  # no gloo group of the group's own
        self._group = group
        self._rank, self._size = group.rank(), group.size()
        self._lock = threading.Lock()
        self._lane_free = 0
        per_node = group._layout.per_node
        self._node_of = [r // per_node for r in group._global_ranks]
        self.nodes = len(set(self._node_of))
        self._sends: list[Any] = []

    def collective(self, op: str, kind: str, nbytes: int, reach_ns: int, root: int) -> tuple[int, int]:
        with self._lock:
            if op in ("scatter", "gather") and root != self._rank:
                # The group's size is its largest side, the root's n chunks (the processes' clock takes the
                # largest any rank gave); c10d's scatter and gather want equal chunks, so a stand-in that
                # is not the root knows it without the root (found by --check: a stand-in that was the
                # root and its witness that was not timed the same scatter differently).
                nbytes *= self._size
            reach, size = reach_ns, nbytes
            ex = self._group._exchange()
            if ex is not None:
                rows = ex.allgather([reach_ns, _clock._KIND_CODES[kind], root, nbytes])
                for s, (_, code, their_root, their_size) in zip(ex.members, rows):
                    theirs = _clock._KIND_NAMES.get(code, "?")
                    if code != _clock._KIND_CODES[kind] or their_root != root or (
                            their_size != nbytes and kind != "all_to_all"):
                        raise _broken(
                            f"in {self._group._describe()} rank {self._group._me} called {kind} of {nbytes} "
                            f"bytes (root {root}) where rank {s} called {theirs} of {their_size} bytes "
                            f"(root {their_root})")
                reach = max(row[0] for row in rows)
                size = max(row[3] for row in rows)
            start = max(reach, self._lane_free)
            end = start + self._cost_ns(kind, size, self._size, self.nodes)
            self._lane_free = end
            self._record(start, end, op, kind, size, "")
            return start, end

    def _record(self, start: int, end: int, op: str, kind: str, nbytes: int, peer: str) -> None:
        """Notes the span for the witness comparison (``--check``), naming the group by its description
        (its name is a hash of its ranks, which differ between a stand-in and its witness)."""
        tl = _timeline()
        if tl is None:
            return
        try:
            desc = self._group.group_desc
        except RuntimeError:
            desc = ""
        label = f" ({desc})" if desc and desc != "undefined" else ""
        tl.add(start, end, op, kind, nbytes, self._group, self.nodes, label + peer)

    def _peer_role(self, peer: int) -> str:
        lay = self._group._layout
        role = lay.role_of(self._group._global_ranks[peer])
        return f", peer of role {','.join(f'{d}={c}' for d, c in zip(lay.vary, role))}"

    def _mirror_what(self, peer: int) -> str:
        g = self._group
        d = (self._rank - peer) % self._size
        return (f"rank {g._me} waited on a receive from rank {g._global_ranks[peer]}, a rank of its own role, "
                f"but made no send to the rank {d} after it in {g._describe() or 'its group'} within the "
                f"group's timeout. By symmetry that send stands for its peer's, so a ring within a role must "
                f"post its send before it waits on its receive (NCCL would hang on such a ring too)")

    def _peer(self, peer: int, what: str) -> int:
        """The exchange rank of a send's or recv's peer (a group rank) of another role, checked (Note
        [Symmetric-rank mode])."""
        g = self._group
        lay = g._layout
        other = g._global_ranks[peer]
        if lay.stand_in(lay.role_of(other)) != other:
            raise _broken(f"rank {g._me} {what} rank {other}, whose role's stand-in is rank "
                          f"{lay.stand_in(lay.role_of(other))}: the pairs of its ranks are not those of "
                          f"their stand-ins")
        ex = g._exchange()
        assert ex is not None  # two roles in the group
        return ex.members.index(other)

    def send(self, peer: int, nbytes: int, reach_ns: int) -> tuple[int, int]:
        with self._lock:
            if self._group._same_role(peer):  # stands for the send its receive from -d gets (_Mirror)
                self._group._mirror_times.put((peer - self._rank) % self._size, (reach_ns, nbytes))
                end = reach_ns + self._p2p_ns(peer, nbytes)
                self._record(reach_ns, end, "send", "send_recv", nbytes, self._peer_role(peer))
                return reach_ns, end
            to = self._peer(peer, "sends to")
            ex = self._group._exchange()
            assert ex is not None
            self._sends = [w for w in self._sends if not w.is_completed()]
            try:
                self._sends.append(ex.gloo.send([torch.tensor([reach_ns, nbytes], dtype=torch.int64)], to, 1))
            except RuntimeError as err:
                raise _clock.ExchangeFailed(str(err)) from err
            end = reach_ns + self._p2p_ns(peer, nbytes)
            self._record(reach_ns, end, "send", "send_recv", nbytes, self._peer_role(peer))
            return reach_ns, end

    def post_recv(self, peer: int):
        with self._lock:
            if self._group._same_role(peer):
                return _MirroredSpan((self._rank - peer) % self._size)
            frm = self._peer(peer, "receives from")
            ex = self._group._exchange()
            assert ex is not None
            buf = torch.empty(2, dtype=torch.int64)
            try:
                return buf, ex.gloo.recv([buf], frm, 1)
            except RuntimeError as err:
                raise _clock.ExchangeFailed(str(err)) from err

    def recv_span(self, posted, peer: int, nbytes: int, reach_ns: int) -> tuple[int, int]:
        if isinstance(posted, _MirroredSpan):
            sent_at, sent_bytes = self._group._mirror_times.take(posted.offset, self._mirror_what(peer))
        else:
            buf, work = posted
            try:
                work.wait()
            except RuntimeError as err:
                raise _clock.ExchangeFailed(str(err)) from err
            sent_at, sent_bytes = int(buf[0]), int(buf[1])
        if sent_bytes != nbytes:
            g = self._group
            raise _broken(f"rank {g._me} receives {nbytes} bytes from rank {g._global_ranks[peer]}, "
                          f"which sends {sent_bytes}")
        start = max(sent_at, reach_ns)
        end = start + self._p2p_ns(peer, nbytes)
        self._record(start, end, "recv", "send_recv", nbytes, self._peer_role(peer))
        return start, end

    def shutdown(self) -> None:
        pass  # the stand-ins' exchange group is the symmetric group's (SymmetricProcessGroup.shutdown)


class _Transport:
    """What a symmetric group's collectives do to data that moves (control data, CPU tensors): gloo's
    method names and arguments, on CPU tensors, composed as if every rank had given its stand-in's
    values (Note [Symmetric-rank mode]). Each returns None (done at the call)."""

    def __init__(self, group: SymmetricProcessGroup) -> None:
        self._g = group

    def _values(self, t: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
        """(a role's value of ``t``, how many of the group's ranks play that role), over the group's roles."""
        g = self._g
        ex = g._exchange()
        if ex is None:
            return [(t.clone(), g.size())]
        theirs = ex.allgather_tensor(t)
        lay = g._layout
        counts: dict[int, int] = {}
        for r in g._global_ranks:
            s = lay.stand_in(lay.role_of(r))
            counts[s] = counts.get(s, 0) + 1
        return [(v, counts[s]) for s, v in zip(ex.members, theirs)]

    def _value_of(self, group_rank: int, t: torch.Tensor) -> torch.Tensor:
        """The value of ``t`` on the group's rank ``group_rank``: its role's stand-in's."""
        g = self._g
        ex = g._exchange()
        if ex is None:
            return t.clone()
        lay = g._layout
        s = lay.stand_in(lay.role_of(g._global_ranks[group_rank]))
        return ex.allgather_tensor(t)[ex.members.index(s)]

    @staticmethod
    def _reduce(values: list[tuple[torch.Tensor, int]], reduce_op) -> torch.Tensor:
        R: Any = dist.ReduceOp.RedOpType
        op = getattr(reduce_op, "op", reduce_op)  # a ReduceOp's type (ReduceOp == RedOpType is one-sided)
        if op == R.SUM:
            return sum((v * c for v, c in values[1:]), values[0][0] * values[0][1])
        if op == R.PRODUCT:
            out = values[0][0] ** values[0][1]
            for v, c in values[1:]:
                out = out * v ** c
            return out
        if op in (R.MIN, R.MAX, R.BAND, R.BOR):
            fn = {R.MIN: torch.minimum, R.MAX: torch.maximum, R.BAND: torch.bitwise_and,
                  R.BOR: torch.bitwise_or}[op]
            out = values[0][0]
            for v, _ in values[1:]:
                out = fn(out, v)
            return out
        if op == R.BXOR:
            out = torch.zeros_like(values[0][0])
            for v, c in values:
                if c % 2:
                    out = out ^ v
            return out
        raise _broken(f"reduce op {op.name} has no symmetric composition")

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        for t in tensors:
            t.copy_(self._reduce(self._values(t), op))

    def allreduce_coalesced(self, tensors, opts=None):
        self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        for t in tensors:
            t.copy_(self._value_of(opts.rootRank, t))

    def reduce(self, tensors, opts):
        if opts.rootRank == self._g.rank():
            for t in tensors:
                t.copy_(self._reduce(self._values(t), opts.reduceOp))
        else:
            for t in tensors:
                self._values(t)  # the stand-ins exchange on every rank of the group

    def _gathered(self, t: torch.Tensor) -> list[torch.Tensor]:
        """Every group rank's value of ``t``, in group rank order."""
        g = self._g
        ex = g._exchange()
        if ex is None:
            return [t] * g.size()
        theirs = ex.allgather_tensor(t)
        lay = g._layout
        return [theirs[ex.members.index(lay.stand_in(lay.role_of(r)))] for r in g._global_ranks]

    def allgather(self, outputs, inputs, opts=None):
        for outs, t in zip(outputs, inputs):
            for o, v in zip(outs, self._gathered(t)):
                o.copy_(v)

    def _allgather_base(self, output, input, opts=None):
        output.view(-1).copy_(torch.cat([v.reshape(-1) for v in self._gathered(input)]))

    allgather_coalesced = allgather  # the same per-list composition

    def reduce_scatter(self, outputs, input_lists, opts):
        me = self._g.rank()
        for o, chunks in zip(outputs, input_lists):
            o.copy_(self._reduce(self._values(chunks[me]), opts.reduceOp))

    def _reduce_scatter_base(self, output, input, opts):
        me = self._g.rank()
        chunk = input.view(-1).view(self._g.size(), -1)[me].view_as(output)
        output.copy_(self._reduce(self._values(chunk), opts.reduceOp))

    def barrier(self, opts=None):
        ex = self._g._exchange()
        if ex is not None:
            ex.data.barrier().wait()

    # send and recv: between stand-ins of different roles over the exchange; within one role through
    # the mirror (what the stand-in sends to the rank d after it is what the rank d before it sends to it)
    def send(self, tensors, dst: int, tag: int = 0):
        g = self._g
        if g._same_role(dst):
            g._mirror_data.put(((dst - g.rank()) % g.size(), tag), [t.clone() for t in tensors])
            return None
        ex = g._exchange()
        assert ex is not None
        return ex.data.send(tensors, ex.members.index(g._global_ranks[dst]), tag)

    def recv(self, tensors, src: int, tag: int = 0):
        g = self._g
        if g._same_role(src):
            clock = g._clock_of()
            assert isinstance(clock, _SymmetricClock)
            return _MirroredRecv(g._mirror_data, ((g.rank() - src) % g.size(), tag), tensors,
                                 clock._mirror_what(src))
        ex = g._exchange()
        assert ex is not None
        return ex.data.recv(tensors, ex.members.index(g._global_ranks[src]), tag)

    def __getattr__(self, name: str):
        # send/recv, gather, scatter, all_to_all of data that moves: no symmetric composition here
        def refuse(*args, **kwargs):
            raise _broken(f"{name} of data that moves (CPU tensors, or control data in timing-only "
                          f"execution) has no symmetric composition in {self._g._describe()}")

        return refuse


class SymmetricProcessGroup(ProcessGroupOpenReg):
    """One c10d group of the job, as its stand-in process sees it: the group's full size and this
    process's rank in it, collectives on the virtual clock for all of its ranks (Note [Symmetric-rank
    mode]). Its collectives go through ``ProcessGroupOpenReg._run`` like every openreg group's."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta, global_ranks: list[int]) -> None:
        from torch._C._distributed_c10d import FakeProcessGroup

        dist.ProcessGroup.__init__(self, rank, size)  # type: ignore[call-arg]  # not the gloo group's
        lay = layout()
        if lay is None:
            raise RuntimeError(f"openreg symmetric-rank mode: {ENV} is not set")
        check_execution()
        self._layout = lay
        self._global_ranks = list(global_ranks) if global_ranks else list(range(size))
        self._me = self._global_ranks[rank]
        # c10d asks a group's backend for its capabilities and keeps the group's name on it: a fake
        # backend of the group's size answers (it moves nothing; _Transport below composes data)
        self._gloo = FakeProcessGroup._create_internal(rank, size)  # type: ignore[assignment]
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM, self._gloo)
        self._transport = _Transport(self)  # type: ignore[assignment]
        self._init_state(store, timeout)
        self._virtual_on = True
        self._exchange_group: _Exchange | None = None
        self._exchange_made = False
        self._exchange_lock = threading.Lock()
        self._mirror_times = _Mirror(timeout.total_seconds())  # sends within a role: their times
        self._mirror_data = _Mirror(timeout.total_seconds())  # and their data, where it moves
        _timeline()  # the witness comparison's record (--check), written at exit
        _refuse_causal_ring_attention_over_one_role()

    def _same_role(self, peer: int) -> bool:
        """Whether the group's rank ``peer`` plays this stand-in's role (a send to it is mirrored)."""
        return self._layout.role_of(self._global_ranks[peer]) == self._layout.role_of(self._me)

    def _exchange(self) -> _Exchange | None:
        """The gloo group of the stand-ins of this group's roles; None when it holds one role. Made by
        the first of the calling thread (a collective's times) and the communication thread (a CPU
        collective's data) to need it, under a lock."""
        with self._exchange_lock:
            if not self._exchange_made:
                lay = self._layout
                if len({lay.role_of(g) for g in self._global_ranks}) > 1:
                    self._exchange_group = _Exchange(self)
                self._exchange_made = True
            return self._exchange_group

    def _clock_of(self):
        if self._clock is None:
            self._clock = _SymmetricClock(self)
        return self._clock

    def set_timeout(self, timeout: timedelta) -> None:
        """The timeout of the operations that follow (torchtitan sets it after its first step): the
        exchanges between stand-ins, a receive's wait for its mirrored send, draining at shutdown. The
        fake backend has none to set (c10d's ProcessGroup.set_timeout refused: "Backend fake does not
        support setting timeout")."""
        self._timeout = timeout
        for mirror in (self._mirror_times, self._mirror_data):
            mirror.set_timeout(timeout.total_seconds())
        with self._exchange_lock:
            if self._exchange_group is not None:
                self._exchange_group.gloo.set_timeout(timeout)
                self._exchange_group.data.set_timeout(timeout)

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None, device_types=None):
        raise NotImplementedError("openreg symmetric-rank mode: split_group is not supported (DeviceMesh "
                                  "makes its groups with new_group when init_process_group binds no device)")

    def shutdown(self) -> None:
        self._queue.close(self._timeout.total_seconds())
        if self._exchange_group is not None:
            self._exchange_group.gloo.shutdown()
            self._exchange_group.data.shutdown()
        dist.ProcessGroup.shutdown(self)


_ring_attention_wrapped = False


def _refuse_causal_ring_attention_over_one_role() -> None:
    """Context parallelism's causal ring attention gives each rank of its group other work at each step
    (which chunks it attends to in full, in half, or not at all), so a group of one role cannot stand
    for it: refused at the call, naming it, rather than every rank timed as the stand-in (Note
    [Symmetric-rank mode]). Non-causal ring attention is the same on every rank and runs. Wraps torch's
    ring attention once, in symmetric-rank mode only; a torch without it has nothing to refuse."""
    global _ring_attention_wrapped
    if _ring_attention_wrapped:
        return
    _ring_attention_wrapped = True
    try:
        from torch.distributed.tensor.experimental._context_parallel import _attention as ring
    except ImportError:
        return
    original = getattr(ring, "_templated_ring_attention", None)
    if original is None:
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def checked(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        group = bound.arguments.get("group")
        if bound.arguments.get("is_causal", False) and isinstance(group, SymmetricProcessGroup):
            lay = group._layout
            roles = {lay.role_of(r) for r in group._global_ranks}
            if group.size() > 1 and len(roles) == 1:
                raise _broken(f"context parallelism's causal ring attention over {group._describe()} "
                              f"({group.size()} ranks of {lay.describe_role(next(iter(roles)))}) gives each "
                              f"of its ranks other attention work at each step, which its stand-in cannot "
                              f"time as its own; make the mesh dim it shards a role (--vary cp)")
        return original(*args, **kwargs)

    ring._templated_ring_attention = checked


def check_execution() -> None:
    """Symmetric-rank mode needs a device profile and timing-only execution (no data moves)."""
    from torch_openreg import _C  # imported here: registration must not load the extension

    if _C._device_profile() is None or not _C._timing_only():
        raise RuntimeError("openreg symmetric-rank mode needs OPENREG_DEVICE_PROFILE and OPENREG_EXECUTE=timing "
                           "(its stand-in processes move no data between the ranks they represent); "
                           "python -m torch_openreg.symmetric sets the latter")
