"""Reads a Chrome trace (as ``torch.openreg.trace`` writes it) into lanes of items, the model that both the
PNG and the HTML timelines draw."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ._common import PathLike, fspath, read_input

# Item kinds (the trace's "cat") and their colours; the PNG and the HTML use the same ones.
KIND_COLOURS: Dict[str, str] = {
    "kernel": "#4C72B0",
    "copy": "#DD8452",
    "collective": "#B8A038",
    "host_callback": "#55A868",
    "event_record": "#8172B3",
    "event_wait": "#C44E52",
}
KERNEL_ALT = "#7F9FCF"  # every other kernel of a lane, so back-to-back kernels stay apart
OTHER_COLOUR = "#8C8C8C"  # a kind this list does not know (a trace from another tool)


@dataclass
class Item:
    name: str
    kind: str
    start: float  # µs, as in the trace
    dur: float  # µs
    args: Dict[str, Any]

    @property
    def end(self) -> float:
        return self.start + self.dur


@dataclass
class Lane:
    """One (device, stream) of the trace: its items by start time, spread over as few rows as keep
    overlapping items apart (a stream's items never overlap; a communication lane's collectives may)."""

    pid: Any
    tid: Any
    label: str
    items: List[Item] = field(default_factory=list)
    rows: List[List[Item]] = field(default_factory=list)


@dataclass
class Timeline:
    path: str
    lanes: List[Lane]

    @property
    def items(self) -> List[Item]:
        return [item for lane in self.lanes for item in lane.items]

    @property
    def start(self) -> float:
        return min((i.start for i in self.items), default=0.0)

    @property
    def end(self) -> float:
        return max((i.end for i in self.items), default=0.0)


def _order(value: Any) -> Tuple[int, Any]:
    """A sort key for pids and tids, which are ints in openreg's traces and may be strings in others'."""
    return (0, value) if isinstance(value, (int, float)) else (1, str(value))


# Note [Reading a trace that is not openreg's]
# A trace file may come from another tool, a hand edit or a truncated copy, so nothing in it is trusted:
# every event is checked where the model reads it, and anything it cannot draw is a ValueError naming the
# file, the event and what is wrong, never an error from deep inside a renderer. Times must be finite and
# within 10^15 µs (31 years) of the origin: the pictures divide by spans, and two times near the float
# limit give a span of inf and a scale of 0. Process and thread ids must be numbers or strings (they key
# and sort the lanes); "args" must be an object whose values JSON can write back without NaN (the page
# embeds them).
_MAX_TIME_US = 1e15


def _number(event: Dict[str, Any], key: str, path: str, index: int) -> float:
    value = event.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{path}: trace event {index} ({event.get('name')!r}) has a non-numeric {key!r}: {value!r}")
    if not -_MAX_TIME_US <= value <= _MAX_TIME_US:  # also refuses nan
        raise ValueError(f"{path}: trace event {index} ({event.get('name')!r}) has {key!r} {value!r}, outside "
                         f"the {_MAX_TIME_US:g} µs a trace may span")
    return float(value)


def _lane_id(event: Dict[str, Any], key: str, path: str, index: int) -> Any:
    value = event.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)) or value != value:  # nan != nan
        raise ValueError(f"{path}: trace event {index} ({event.get('name')!r}) has {key!r} {value!r}: expected "
                         "a number or a string")
    return value


def _args(event: Dict[str, Any], path: str, index: int) -> Dict[str, Any]:
    args = event.get("args")
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise ValueError(f"{path}: trace event {index} ({event.get('name')!r}) has 'args' {args!r}: expected "
                         "an object")
    try:
        json.dumps(args, allow_nan=False)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"{path}: trace event {index} ({event.get('name')!r}) has 'args' that cannot be "
                         f"shown: {error}") from None
    return args


def load_trace(trace: PathLike) -> Timeline:
    """Reads the Chrome trace JSON at ``trace``. A missing file raises FileNotFoundError; a file that is not
    JSON, JSON that is not a Chrome trace (an object with a ``traceEvents`` list, or a bare list of
    events), or an event that cannot be drawn raises ValueError naming the file (Note [Reading a trace
    that is not openreg's])."""
    path = fspath(trace)
    data = read_input(path)  # FileNotFoundError / IsADirectoryError as open() raises them
    try:
        doc = json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not a Chrome trace: it is not JSON ({error})") from None
    except RecursionError:
        raise ValueError(f"{path} is not a Chrome trace: its JSON is nested too deeply") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ValueError(f"{path} is not a Chrome trace: expected an object with a 'traceEvents' list of events "
                         "(as torch.openreg.trace writes)")
    process_names: Dict[Any, str] = {}
    thread_names: Dict[Tuple[Any, Any], str] = {}
    process_order: Dict[Any, Any] = {}
    thread_order: Dict[Tuple[Any, Any], Any] = {}
    lanes: Dict[Tuple[Any, Any], Lane] = {}
    for index, e in enumerate(events):
        ph = e.get("ph")
        if ph not in ("M", "X"):
            continue  # a kind of event the pictures do not draw
        key = (_lane_id(e, "pid", path, index), _lane_id(e, "tid", path, index))
        if ph == "M":
            args = _args(e, path, index)
            if e.get("name") == "process_name":
                process_names[key[0]] = str(args.get("name", key[0]))
            elif e.get("name") == "thread_name":
                thread_names[key] = str(args.get("name", key[1]))
            elif e.get("name") == "process_sort_index":
                process_order[key[0]] = _lane_id(args, "sort_index", path, index)
            elif e.get("name") == "thread_sort_index":
                thread_order[key] = _lane_id(args, "sort_index", path, index)
        else:  # complete events: the only kind torch.openreg.trace writes for work items
            name = str(e.get("name", ""))
            kind = str(e.get("cat", ""))
            if name.startswith("collective:"):  # collectives are traced as items named "collective:<op>"
                kind = "collective"
            lane = lanes.setdefault(key, Lane(key[0], key[1], ""))
            lane.items.append(Item(name, kind, _number(e, "ts", path, index),
                                   max(_number(e, "dur", path, index), 0.0), dict(_args(e, path, index))))
    ordered = sorted(lanes.values(), key=lambda lane: (
        _order(process_order.get(lane.pid, lane.pid)), _order(lane.pid),
        _order(thread_order.get((lane.pid, lane.tid), lane.tid)), _order(lane.tid)))
    for lane in ordered:
        lane.items.sort(key=lambda i: (i.start, i.end))
        lane.label = _lane_label(lane, process_names, thread_names)
        _fill_rows(lane)
    return Timeline(path, ordered)


def _fill_rows(lane: Lane) -> None:
    lane.rows = []
    for item in lane.items:  # the first row whose last item has ended: rows stay sorted and disjoint
        for row in lane.rows:
            # ts + dur, both rounded µs in the file, may exceed the next item's ts by a rounding
            # error: a picosecond's slack keeps back-to-back items of one stream on one row.
            if row[-1].end <= item.start + 1e-6:
                row.append(item)
                break
        else:
            lane.rows.append([item])


def clip(timeline: Timeline, window_ms: Optional[Tuple[float, float]]) -> Timeline:
    """The items of ``timeline`` that overlap ``window_ms`` (ms from the trace's start; None: all), with
    every lane kept so that pages of one trace line up."""
    if window_ms is None:
        return timeline
    start, end = window_us(window_ms)
    lanes = []
    for lane in timeline.lanes:
        kept = Lane(lane.pid, lane.tid, lane.label, [i for i in lane.items if i.end >= start and i.start <= end])
        _fill_rows(kept)
        lanes.append(kept)
    return Timeline(timeline.path, lanes)


def window_us(window_ms: Tuple[float, float]) -> Tuple[float, float]:
    """``window_ms`` (start, end in ms from the trace's start) in µs, or ValueError if it is not a window:
    not two finite numbers, or empty or reversed (end <= start)."""
    try:
        start, end = (float(v) * 1e3 for v in window_ms)
    except (TypeError, ValueError):
        raise ValueError(f"window_ms must be (start, end) in ms, got {window_ms!r}") from None
    if not (math.isfinite(start) and math.isfinite(end) and end > start):
        raise ValueError(f"window_ms must be (start, end) with finite end > start, got {window_ms!r}")
    return start, end


def _lane_label(lane: Lane, process_names: Dict[Any, str], thread_names: Dict[Tuple[Any, Any], str]) -> str:
    device = process_names.get(lane.pid, f"openreg:{lane.pid}" if isinstance(lane.pid, int) else str(lane.pid))
    if lane.items and all(i.kind == "collective" for i in lane.items):
        # torch.distributed's communication lane: a stream id that only names the lane
        return f"{device} communication"
    stream = thread_names.get((lane.pid, lane.tid))
    if stream is None:
        stream = "default stream" if lane.tid == 0 else f"stream {lane.tid}"
    return f"{device} {stream}"


def colour(kind: str) -> str:
    return KIND_COLOURS.get(kind, OTHER_COLOUR)


def text_colour(fill: str) -> str:
    """Black or white, whichever reads better on ``fill`` (#rrggbb)."""
    r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


def time_unit(span_us: float) -> Tuple[str, float]:
    """The axis unit for a span of ``span_us`` µs: (name, µs per unit)."""
    if span_us >= 2e6:
        return "s", 1e6
    if span_us >= 2e3:
        return "ms", 1e3
    if span_us >= 2:
        return "µs", 1.0
    return "ns", 1e-3


def pages(timeline: Timeline, items_per_page: int) -> List[Tuple[float, float, int]]:
    """Cuts the timeline into windows of at most ``items_per_page`` items each (counted over all lanes):
    [(start µs, end µs, items)]. Each cut falls in the widest idle gap (no lane busy) among the page's
    last third, so a page ends where the devices paused (a step's end, a host sync) when there is one."""
    if items_per_page < 1:
        raise ValueError(f"items_per_page must be at least 1, got {items_per_page}")
    items = sorted(timeline.items, key=lambda i: (i.start, i.end))
    out: List[Tuple[float, float, int]] = []
    first = 0
    while first < len(items):
        last = min(first + items_per_page, len(items))  # exclusive
        if last < len(items):
            lo = first + max(1, (2 * items_per_page) // 3)
            busy_until = max(i.end for i in items[first:lo])
            best, best_gap = lo, items[lo].start - busy_until
            for k in range(lo, last + 1):  # a cut before items[k]; k <= last < len(items)
                gap = items[k].start - busy_until
                if gap >= best_gap:
                    best, best_gap = k, gap
                busy_until = max(busy_until, items[k].end)
            last = best
        chunk = items[first:last]
        out.append((chunk[0].start, max(i.end for i in chunk), len(chunk)))
        first = last
    return out
