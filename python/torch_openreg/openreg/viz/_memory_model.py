"""Reads a memory snapshot (``torch.openreg.memory._snapshot()``, or the pickle ``_dump_snapshot`` writes;
torch.cuda.memory's have the same structure) into what the memory pictures draw: every allocation's
lifetime and where it sits in a stack of the bytes allocated at each moment.

Note [Allocated memory over time]
The x axis counts the recorded allocator events that change the bytes allocated, in order: step k is the
k-th "alloc" or "free_requested" of a device's history, and the state after step k holds from k to k+1;
step 0 is the state before the first recorded event. An allocation lasts from its "alloc" to its
"free_requested", the moment ``memory_allocated()`` drops (the allocator counts a block freed when the
tensor dies, even if other streams' work still holds it until "free_completed"), so the stack's height
after the last step is the device's ``memory_allocated()`` when the snapshot was taken, byte for byte.
Allocations made before the history started (recording began late, or older entries fell out of
``max_entries``) are found from the snapshot's live blocks and from frees of addresses the history never
saw allocated; they sit at the bottom of the stack from step 0. Each allocation keeps its place in the
stack; when one below it is freed it moves down by that size, so nothing overlaps and no gap opens.
Reserved memory starts at the snapshot's segments less the history's net segment changes, so it too is
exact at every step.
"""

from __future__ import annotations

import io
import math
import pickle
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

from ._common import PathLike, fspath, read_input

Snapshot = Dict[str, Any]

# One hue per stream (in order of first use on a device); allocations of a stream alternate shades of it.
STREAM_COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C",
                  "#B8A038", "#64B5CD"]
_SHADES = [0.0, 0.3, 0.12, 0.42, 0.06, 0.22]  # how far each allocation's colour is mixed towards white


def shade(stream_index: int, n: int) -> str:
    """The colour of the ``n``-th allocation of the device's ``stream_index``-th stream (#rrggbb)."""
    base = STREAM_COLOURS[stream_index % len(STREAM_COLOURS)]
    mix = _SHADES[n % len(_SHADES)]
    r, g, b = (int(base[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * mix):02x}" for c in (r, g, b))


class _NoGlobals(pickle.Unpickler):
    """A snapshot is dicts, lists, tuples, strings and numbers: a pickle that names any class or function
    is not one, and is refused before anything in it runs."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a memory snapshot holds no objects of {module}.{name}")


def load_snapshot(snapshot: Union[Snapshot, PathLike]) -> Snapshot:
    """``snapshot`` itself if it is a snapshot dict, else the snapshot pickled at that path. A missing file
    raises FileNotFoundError; anything that is not a snapshot (no ``segments`` and ``device_traces``
    lists, or an entry the pictures cannot draw) raises ValueError naming the file and what is wrong."""
    where = "the snapshot"
    if not isinstance(snapshot, dict):
        path = fspath(snapshot)
        where = path
        data = read_input(path)
        try:
            snapshot = _NoGlobals(io.BytesIO(data)).load()
        except Exception as e:  # noqa: BLE001 - whatever a corrupt pickle raises, it is not a snapshot
            raise ValueError(f"{path} is not a memory snapshot (a pickle from "
                             f"torch.openreg.memory._dump_snapshot): {type(e).__name__}: {e}") from None
    if not (isinstance(snapshot, dict) and isinstance(snapshot.get("segments"), list)
            and isinstance(snapshot.get("device_traces", []), list)):
        raise ValueError(f"{where} is not a memory snapshot: expected a dict with 'segments' and 'device_traces' "
                         "lists, as torch.openreg.memory._snapshot() returns")
    _check_entries(snapshot, where)
    return snapshot


# What the pictures read of each entry, and the types it must have (None: absent is allowed as the value);
# the same for a snapshot from torch.cuda.memory, which has these keys too.
_INT_KEYS = {"segment": ("device", "address", "total_size", "allocated_size", "active_size", "stream"),
             "block": ("address", "size", "requested_size"),
             "event": ("addr", "size", "stream")}


def _check_entries(snapshot: Snapshot, where: str) -> None:
    """Raises ValueError naming ``where`` and the first entry the pictures cannot draw: a segment, block,
    trace event or frame that is not a dict, a count or address that is not a whole number, a time that
    is not a finite number, stacks that are not lists. Checked up front so that a malformed snapshot is
    reported as one, not as a TypeError from deep inside a picture."""

    def bad(what: str) -> ValueError:
        return ValueError(f"{where} is not a memory snapshot: {what}")

    def check(entry: Any, kind: str, name: str) -> None:
        if not isinstance(entry, dict):
            raise bad(f"{name} is {type(entry).__name__}, not a dict")
        for key in _INT_KEYS[kind]:
            value = entry.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise bad(f"{name} has {key!r} = {value!r}, not a whole number")
        frames = entry.get("frames")
        if frames is not None and not (isinstance(frames, list) and all(isinstance(f, dict) for f in frames)):
            raise bad(f"{name} has 'frames' that are not a list of dicts")

    for i, seg in enumerate(snapshot["segments"]):
        check(seg, "segment", f"segment {i}")
        blocks = seg.get("blocks")
        if blocks is not None and not isinstance(blocks, list):
            raise bad(f"segment {i} has 'blocks' that are not a list")
        for j, block in enumerate(blocks or []):
            check(block, "block", f"block {j} of segment {i}")
    for d, trace in enumerate(snapshot.get("device_traces") or []):
        if trace is None:
            continue
        if not isinstance(trace, list):
            raise bad(f"the history of device {d} is {type(trace).__name__}, not a list")
        for k, event in enumerate(trace):
            check(event, "event", f"event {k} of device {d}'s history")
            t = event.get("time_us")
            if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)):
                raise bad(f"event {k} of device {d}'s history has 'time_us' = {t!r}, not a finite number")
    devices = {seg.get("device") or 0 for seg in snapshot["segments"]}
    if any(d < 0 or d > 1 << 16 for d in devices):
        raise bad(f"a segment's 'device' is out of range: {sorted(devices)}")


@dataclass
class Allocation:
    addr: int
    size: int
    stream: int  # index into DeviceMemory.streams
    start: int  # step of its "alloc"; 0 if it was allocated before the history
    end: Optional[int]  # step of its "free_requested"; None while allocated at the snapshot
    frames: List[Dict[str, Any]]
    before_history: bool = False
    time_alloc: Optional[float] = None  # µs, the allocator's clock
    time_free: Optional[float] = None
    completed: Optional[int] = None  # step after which its "free_completed" came (other streams' work done)
    order: int = 0  # its place among the device's allocations, oldest first: picks its shade
    offsets: List[Tuple[int, int]] = field(default_factory=list)  # (step, bytes below it from that step on)


@dataclass
class DeviceMemory:
    device: int
    steps: int  # K: the history's alloc and free_requested events
    times: List[Optional[float]]  # µs of steps 0..K, and of the snapshot (K + 1)
    allocated: List[int]  # bytes allocated after each step 0..K
    reserved: List[int]  # bytes reserved after each step 0..K
    allocations: List[Allocation]  # drawn one by one
    merged: int  # how many smaller allocations are drawn as one band on top of the others ("other")
    merged_base: List[int]  # bytes of the drawn allocations after each step: the merged band's bottom
    streams: List[int]  # raw stream handles, in order of first use
    segments: List[Dict[str, Any]]
    ooms: List[int]  # steps after which an out-of-memory was recorded
    history: bool  # whether any history was recorded for this device

    @property
    def peak(self) -> Tuple[int, int]:
        """(bytes, step) of the highest allocated memory in the history."""
        best = max(range(len(self.allocated)), key=lambda k: (self.allocated[k], -k))
        return self.allocated[best], best


def device_memory(snapshot: Snapshot, max_allocations: int = 3000) -> List[DeviceMemory]:
    """Every device of ``snapshot`` that had memory or history, as laid out in Note [Allocated memory over
    time]. At most ``max_allocations`` allocations per device are drawn one by one (those with the largest
    size times lifetime); the rest share one band on top (their sum at each step), so a long history stays
    quick to draw."""
    traces = snapshot.get("device_traces") or []
    devices = sorted({int(s.get("device", 0)) for s in snapshot["segments"]}
                     | {d for d, t in enumerate(traces) if t})
    return [_one_device(snapshot, d, traces[d] if d < len(traces) else [], max_allocations) for d in devices]


def _one_device(snapshot: Snapshot, device: int, trace: List[Dict[str, Any]], max_allocations: int) -> DeviceMemory:
    segments = sorted((s for s in snapshot["segments"] if int(s.get("device", 0)) == device),
                      key=lambda s: s.get("address", 0))
    streams: Dict[int, int] = {}

    def stream_index(raw: Any) -> int:
        return streams.setdefault(int(raw or 0), len(streams))

    live: Dict[int, Allocation] = {}
    awaiting: Dict[int, Allocation] = {}  # freed, "free_completed" not yet seen
    allocations: List[Allocation] = []
    before: List[Allocation] = []
    step_events: List[Tuple[str, Allocation]] = []
    times: List[Optional[float]] = [trace[0].get("time_us") if trace else None]
    reserved_delta: List[int] = [0]  # segment bytes gained (or given back) at each step
    growing = 0  # a segment allocated for the next "alloc": counted at that step, with it
    ooms: List[int] = []
    snapshot_time: Optional[float] = None
    for e in trace:
        action, addr, size = e.get("action"), int(e.get("addr", 0)), int(e.get("size", 0))
        if action == "alloc":
            a = Allocation(addr, size, stream_index(e.get("stream")), len(step_events) + 1, None,
                           list(e.get("frames") or []), time_alloc=e.get("time_us"))
            live[addr] = a
            allocations.append(a)
            step_events.append(("alloc", a))
        elif action == "free_requested":
            if addr in live:
                a = live.pop(addr)
            else:  # allocated before the history began
                a = Allocation(addr, size, stream_index(e.get("stream")), 0, None, [], before_history=True)
                before.append(a)
            a.end = len(step_events) + 1
            a.time_free = e.get("time_us")
            awaiting[addr] = a
            step_events.append(("free", a))
        elif action == "free_completed":
            if addr in awaiting:
                awaiting.pop(addr).completed = len(step_events)
        elif action in ("segment_alloc", "segment_map"):
            growing += size
        elif action in ("segment_free", "segment_unmap"):
            reserved_delta[-1] -= size
        elif action == "oom":
            ooms.append(len(step_events))
        elif action == "snapshot":
            snapshot_time = e.get("time_us")
        if action in ("alloc", "free_requested"):
            times.append(e.get("time_us"))
            reserved_delta.append(growing)
            growing = 0
    reserved_delta[-1] += growing
    # Blocks allocated at the snapshot that the history never saw allocated: allocated before it began.
    for seg in segments:
        for block in seg.get("blocks") or []:
            if block.get("state") == "active_allocated" and int(block.get("address", 0)) not in live:
                a = Allocation(int(block["address"]), int(block.get("size", 0)), stream_index(seg.get("stream")),
                               0, None, list(block.get("frames") or []), before_history=True)
                before.append(a)
    before.sort(key=lambda a: a.addr)
    ordered = before + allocations
    for n, a in enumerate(ordered):
        a.order = n
    steps = len(step_events)
    last_time = next((t for t in reversed(times) if t is not None), None)
    times.append(snapshot_time if snapshot_time is not None else last_time)

    # Which allocations get a band of their own: those covering the most of the picture, size times
    # lifetime in steps (ties: the older), so a long-lived weight outranks a brief temporary of its size.
    drawn = ordered
    if len(ordered) > max_allocations:
        def area(a: Allocation) -> int:
            return a.size * ((a.end if a.end is not None else steps + 1) - a.start)

        keep = set(id(a) for a in sorted(ordered, key=lambda a: (-area(a), a.order))[:max_allocations])
        drawn = [a for a in ordered if id(a) in keep]
    own = set(id(a) for a in drawn)

    stack: List[Allocation] = []
    drawn_bytes = 0
    other_bytes = 0
    for a in before:
        if id(a) in own:
            a.offsets = [(0, drawn_bytes)]
            stack.append(a)
            drawn_bytes += a.size
        else:
            other_bytes += a.size
    allocated = [drawn_bytes + other_bytes]
    merged_base = [drawn_bytes]
    for k, (kind, a) in enumerate(step_events, start=1):
        if id(a) not in own:
            other_bytes += a.size if kind == "alloc" else -a.size
        elif kind == "alloc":
            a.offsets = [(k, drawn_bytes)]
            stack.append(a)
            drawn_bytes += a.size
        else:
            i = stack.index(a)
            del stack[i]
            drawn_bytes -= a.size
            for b in stack[i:]:  # everything above it moves down by its size
                b.offsets.append((k, b.offsets[-1][1] - a.size))
        allocated.append(drawn_bytes + other_bytes)
        merged_base.append(drawn_bytes)

    final_reserved = sum(int(s.get("total_size", 0)) for s in segments)
    reserved = []
    level = final_reserved - sum(reserved_delta)
    for delta in reserved_delta:
        level += delta
        reserved.append(level)
    return DeviceMemory(device, steps, times, allocated, reserved, drawn, len(ordered) - len(drawn), merged_base,
                        list(streams), segments, ooms, bool(trace))


def python_frames(frames: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The Python frames of a stack, or all of it if it has none (a stack recorded with stacks="all" has
    C++ frames too, mostly the allocator's and the dispatcher's own)."""
    py = [f for f in frames if str(f.get("filename", "")).endswith(".py")]
    return py or frames


def frame_text(frame: Dict[str, Any]) -> str:
    """``name (file:line)``; an installed package's file is named from its package ("torch/nn/...")."""
    filename = str(frame.get("filename", "?"))
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in filename:
            filename = filename.rsplit(marker, 1)[1]
    return f"{frame.get('name', '?')} ({filename}:{frame.get('line', 0)})"


def allocated_at(frames: List[Dict[str, Any]]) -> str:
    """Where a block was allocated, in a line: the innermost frame outside torch's own Python (the user's
    line), with the innermost frame when that is torch's (say "convert (torch/nn/modules/module.py:1369)"
    under ``model.to(...)``)."""
    frames = python_frames(frames)
    if not frames:
        return ""
    texts = [frame_text(f) for f in frames]
    user = next((t for t in texts if " (torch/" not in t), None)
    if user is None or user == texts[0]:
        return texts[0]
    return f"{user}, in {frames[0].get('name', '?')}"


def stream_label(dm: DeviceMemory, index: int) -> str:
    """A stream as a reader names it: "stream 1", "stream 2", ... in the order the device first used
    them. A snapshot holds a stream's handle (an address, as torch.cuda's holds a cudaStream_t), which
    means nothing to its reader and differs between runs, so it is never shown."""
    return f"stream {index + 1}"
