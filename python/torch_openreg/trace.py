"""Device timeline: record every work item the simulated devices run and write Chrome trace JSON.

    with torch.openreg.trace("run.json"):
        model(x)

The file opens in Perfetto (ui.perfetto.dev) or chrome://tracing: one process per device and one thread
(lane) per stream. Copies appear on the stream that ordered them, with their byte counts, so they need no
lanes of their own. ``bench/python/timeline_png.py`` renders the same file to a
PNG Gantt chart.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import List, Optional

__all__ = ["trace", "TraceRecord", "records_to_chrome", "write_chrome_trace"]

_active_lock = threading.Lock()
_active: Optional["trace"] = None


@dataclass(frozen=True)
class TraceRecord:
    """One work item that ran on a device."""

    name: str
    device: int
    stream: int
    kind: str
    start_ns: int
    end_ns: int
    bytes: int


def _collect_raw(raw) -> List[TraceRecord]:
    return [
        TraceRecord(name, device, stream, kind, start, end, nbytes)
        for (name, device, stream, kind, start, end, nbytes) in raw
    ]


def records_to_chrome(records: List[TraceRecord]) -> dict:
    """Chrome trace-event JSON (a dict) for ``records``: pid = device, tid = stream, times in µs."""
    origin = min((r.start_ns for r in records), default=0)
    events = []
    lanes = set()
    for r in records:
        lanes.add((r.device, r.stream))
        args: dict = {"stream": r.stream}
        if r.bytes:
            args["bytes"] = r.bytes
            dur_s = max(r.end_ns - r.start_ns, 1) / 1e9
            args["GB/s"] = round(r.bytes / dur_s / 1e9, 3)
        events.append({
            "name": r.name, "cat": r.kind, "ph": "X", "pid": r.device, "tid": r.stream,
            "ts": (r.start_ns - origin) / 1e3, "dur": max(r.end_ns - r.start_ns, 0) / 1e3, "args": args,
        })
    for device in sorted({d for d, _ in lanes}):
        events.append({"name": "process_name", "ph": "M", "pid": device, "args": {"name": f"openreg:{device}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": device, "args": {"sort_index": device}})
    for device, stream in sorted(lanes):
        label = "default stream" if stream == 0 else f"stream {stream}"
        events.append({"name": "thread_name", "ph": "M", "pid": device, "tid": stream, "args": {"name": label}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": device, "tid": stream,
                       "args": {"sort_index": stream}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(records: List[TraceRecord], path: str) -> None:
    """Writes ``records`` as Chrome trace JSON to ``path`` (atomically: a partial file never appears)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(records_to_chrome(records), f)
    os.replace(tmp, path)


class trace:
    """Context manager that records the devices' timeline while active.

    Args:
        path: where to write Chrome trace JSON on exit (``None``: keep the records only).

    After exit, ``.records`` holds the :class:`TraceRecord` list. Only one trace may be active in a
    process at a time (tracing is process-wide, like the devices); nesting raises RuntimeError.
    Exiting synchronizes every device first, so the timeline holds all work issued inside the block.
    """

    def __init__(self, path: Optional[str] = None):
        self.path = path
        self.records: List[TraceRecord] = []

    def __enter__(self) -> "trace":
        global _active
        from . import _C, openreg

        openreg._lazy_init()
        with _active_lock:
            if _active is not None:
                raise RuntimeError("torch.openreg.trace: a trace is already active in this process")
            _active = self
        _sync_all()
        _C._trace_start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        global _active
        from . import _C

        try:
            _sync_all()
        finally:
            raw = _C._trace_stop()
            with _active_lock:
                _active = None
        self.records = _collect_raw(raw)
        if self.path is not None:
            write_chrome_trace(self.records, self.path)


def _sync_all() -> None:
    from . import openreg

    for d in range(openreg.device_count()):
        openreg.synchronize(d)
