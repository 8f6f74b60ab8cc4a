"""Device timeline: record every work item the simulated devices run and write Chrome trace JSON.

    with torch.openreg.trace("run.json"):
        model(x)

The file opens in Perfetto (ui.perfetto.dev) or chrome://tracing: one process per device and one thread
(lane) per stream. Copies appear on the stream that ordered them, with their byte counts, so they need no
lanes of their own. ``torch.openreg.viz`` draws the same file offline: a self-contained zoomable HTML
timeline (``timeline_html``) or PNG pages with every op named (``timeline_pngs``).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
import threading
from dataclasses import dataclass
from typing import List, Optional, Union

from torch_openreg import _C

from ._device import device_count, synchronize
from ._initialization import _lazy_init

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


# Note [Writing the trace file]
# Every file openreg writes from Python (trace JSON here, the pages and pictures of torch.openreg.viz) goes
# through write_file, so one set of rules holds for all of them. The file appears whole or not at all: the
# data goes to a temporary file in the destination's directory, which then replaces the destination
# (rename is atomic within a file system). The temporary file gets a random name, created exclusively
# (tempfile.mkstemp: O_CREAT|O_EXCL|O_NOFOLLOW), so nothing planted at a guessable name (a symlink at
# "run.json.tmp") is ever written through, and it is removed whenever the write fails (a full disk midway,
# a destination that became a directory). The destination must be a regular file or a new path: opening a
# symlink would write through it (a victim file overwritten with HTML; a dangling one's target created),
# opening a fifo would block until a reader came, and a rename would replace a device node, a fifo or a
# symlink by the new file, so those are refused, checked with lstat (which opens nothing and follows
# nothing). trace() checks all of this, and that a file can be created there, when it is called, so a
# bad path fails before the traced work runs rather than after it.

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def check_destination(path: str, who: str = "torch.openreg.trace") -> None:
    """Raises the OSError that names why ``path`` cannot receive a file that ``who`` writes: its directory
    is missing (FileNotFoundError) or is not a directory (NotADirectoryError), ``path`` is a file we may not
    write (PermissionError), or it exists and is not a regular file (IsADirectoryError, or OSError ELOOP
    for a symlink, EINVAL for a device node, fifo or socket). Nothing is followed: a symlink is refused
    whatever it points to, a dangling one included."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        parent = os.path.dirname(path) or "."
        try:
            is_dir = stat.S_ISDIR(os.stat(parent).st_mode)
        except OSError as e:  # OSError(errno, ...) is the matching subclass: FileNotFoundError, ...
            raise OSError(e.errno, f"{e.strerror} (the directory {parent!r})", path) from None
        if not is_dir:
            raise NotADirectoryError(errno.ENOTDIR, f"{os.strerror(errno.ENOTDIR)}: {parent!r}", path) from None
        return
    if stat.S_ISREG(st.st_mode):
        if not os.access(path, os.W_OK):  # open(path, "w") would refuse it; a rename would not
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, f"{who}: the destination is a symbolic link, which is never "
                      "followed; pass the path it points to", path)
    kind = "fifo" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else "device node"
    raise OSError(errno.EINVAL, f"{who}: the destination is a {kind}, not a regular file", path)


def _create_temporary(path: str) -> tuple[int, str]:
    """An exclusively created, empty temporary file next to ``path``: (descriptor, its path)."""
    directory, name = os.path.split(path)
    try:
        return tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory or ".")
    except OSError as e:  # named by the destination, as open(path, "w") would, not by the random name
        raise OSError(e.errno, f"{e.strerror} (creating a file in {directory or '.'!r})", path) from None


def check_writable(path: PathLike, who: str = "torch.openreg.trace") -> str:
    """``path`` as a str, once :func:`check_destination` accepts it and a file can be created beside it
    (the probe file is removed at once): what a writer checks before its work, so that a bad path fails
    first."""
    path = _fspath(path)
    check_destination(path, who)
    fd, probe = _create_temporary(path)
    os.close(fd)
    os.unlink(probe)
    return path


def _new_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file (0o666 less the umask); mkstemp's files are 0o600."""
    try:
        with open("/proc/self/status") as f:  # reads the umask without changing it (Linux 4.7+)
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # without /proc, setting it is the only way to read it: restored at once
    os.umask(mask)
    return 0o666 & ~mask


def _fspath(path: PathLike) -> str:
    return os.fsdecode(os.fspath(path))


def write_file(path: PathLike, data: Union[str, bytes], who: str = "torch.openreg.trace") -> str:
    """Writes ``data`` (a str as UTF-8) to ``path`` atomically: a partial file never appears, a failure
    leaves nothing behind, and a destination that is not a regular file or a new path is refused with an
    OSError naming it (Note [Writing the trace file]). ``who`` names the writer in refusals. Returns the
    path written, as a str."""
    path = _fspath(path)
    check_destination(path, who)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)  # an existing file keeps its mode
    except FileNotFoundError:
        mode = _new_file_mode()
    fd, tmp = _create_temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(payload)
        check_destination(path, who)  # it may have changed since
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def write_chrome_trace(records: List[TraceRecord], path: PathLike) -> None:
    """Writes ``records`` as Chrome trace JSON to ``path``, atomically: a partial file never appears,
    and a failure leaves nothing behind (Note [Writing the trace file])."""
    path = _fspath(path)
    check_destination(path)
    write_file(path, json.dumps(records_to_chrome(records)))


class trace:
    """Context manager that records the devices' timeline while active.

    Args:
        path: where to write Chrome trace JSON on exit (``None``: keep the records only): a new path or a
            regular file, in a directory where files can be created. Anything else raises OSError here,
            when ``trace`` is called, not at exit (Note [Writing the trace file]).

    After exit, ``.records`` holds the :class:`TraceRecord` list. Only one trace may be active in a
    process at a time (tracing is process-wide, like the devices); nesting raises RuntimeError.
    Exiting synchronizes every device first, so the timeline holds all work issued inside the block.
    """

    def __init__(self, path: Optional[PathLike] = None):
        self.path: Optional[str] = None
        if path is not None:
            # A bad path raises here, before the traced work: what open(path, "w") would raise
            # (FileNotFoundError, PermissionError, ...), or a refusal of a destination that is not a
            # regular file (Note [Writing the trace file]).
            self.path = check_writable(path)
        self.records: List[TraceRecord] = []

    def __enter__(self) -> "trace":
        global _active
        _lazy_init()
        with _active_lock:
            if _active is not None:
                raise RuntimeError("torch.openreg.trace: a trace is already active in this process")
            _active = self
        _sync_all()
        _C._trace_start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        global _active
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
    for d in range(device_count()):
        synchronize(d)
