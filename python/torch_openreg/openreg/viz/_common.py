"""What the timeline and the memory views share: reading inputs, embedding data in a page, units."""

from __future__ import annotations

import errno
import html
import io
import json
import os
import stat
from typing import Any, Union

from .._trace import check_writable, write_file

PathLike = Union[str, "os.PathLike[str]"]

# Note [Self-contained pages]
# Every page these renderers write is one HTML file that needs nothing else: its style and script are
# inline and its data is a JSON document in a <script type="application/json"> element, parsed by the
# page's own script. Nothing is loaded from a network or from another file (no src= or href= to a URL),
# so the page opens in a browser with no network, from a mail attachment or a CI artifact, and shows the
# same thing years later. The JSON is made safe to embed: "<", ">" and "&" are written as \u escapes,
# so no op or file name (say "</script>") can end the element early; JSON.parse reads them back as the
# characters they were.


def embed_json(value: Any) -> str:
    """``value`` as JSON text that can sit inside a <script> element (Note [Self-contained pages])."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def fspath(path: PathLike) -> str:
    return os.fsdecode(os.fspath(path))


def read_input(path: str) -> bytes:
    """The bytes of the regular file at ``path``. Opened without blocking (a fifo would otherwise wait for
    a writer) and checked on the opened descriptor: a directory raises IsADirectoryError as open() does,
    anything else that is not a regular file (a fifo, /dev/zero, which never ends) an OSError naming it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            kind = "fifo" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device node"
            raise OSError(errno.EINVAL, f"torch.openreg.viz: the input is a {kind}, not a regular file", path)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            fd = -1  # the file object owns it now
            return f.read()
    finally:
        if fd >= 0:
            os.close(fd)


def check_output(path: PathLike, who: str) -> str:
    """``path`` as a str once it can receive a picture: checked before anything is drawn, so that a bad
    destination (a symlink, a fifo, a missing directory, ...) fails at once, naming it (OSError)."""
    return check_writable(path, who)


def write_text(path: PathLike, text: str, who: str) -> str:
    """Writes a page through openreg's one file writer (Note [Writing the trace file] in
    python/torch_openreg/openreg/_trace.py): atomically, never through a symlink or into a fifo."""
    return write_file(path, text, who)


def write_figure(fig: Any, path: PathLike, dpi: int, who: str) -> str:
    """Saves a matplotlib figure as PNG through the same writer: rendered to memory first, since savefig
    opens its destination itself (following a symlink, blocking on a fifo)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return write_file(path, buffer.getvalue(), who)


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units, e.g. ``"3.8 MiB"`` (exact below 1 KiB)."""
    if abs(n) < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.3g} {unit}" if abs(n) < 100 else f"{n:.0f} {unit}"
    raise AssertionError("unreachable")


def format_us(us: float) -> str:
    """A duration given in microseconds, in the unit that reads best (ns, µs, ms or s)."""
    a = abs(us)
    if a == 0:
        return "0"
    if a < 1:
        return f"{us * 1e3:.3g} ns"
    if a < 1e3:
        return f"{us:.4g} µs"
    if a < 1e6:
        return f"{us / 1e3:.4g} ms"
    return f"{us / 1e6:.4g} s"


def page(title: str, style: str, body: str, data: Any, script: str) -> str:
    """One self-contained HTML document (Note [Self-contained pages])."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{escape(title)}</title>\n<style>{style}</style></head>\n<body>\n{body}\n"
        f"<script type=\"application/json\" id=\"data\">{embed_json(data)}</script>\n"
        f"<script>{script}</script>\n</body></html>\n"
    )


BASE_STYLE = """
:root { color-scheme: light; }
body { font: 13px/1.4 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; margin: 0; color: #222;
       background: #fff; }
header { padding: 8px 14px; border-bottom: 1px solid #ddd; background: #fafafa; }
header h1 { font-size: 16px; margin: 0 0 4px 0; }
.muted { color: #666; }
.controls { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin-top: 6px; }
.controls button, .controls select, .controls input { font: inherit; padding: 2px 8px; }
.legend { display: inline-flex; flex-wrap: wrap; gap: 10px; align-items: center; }
.chip { display: inline-block; width: 12px; height: 12px; border-radius: 2px; vertical-align: -2px;
        margin-right: 4px; }
#tip { position: fixed; pointer-events: none; background: rgba(255,255,255,0.97); border: 1px solid #999;
       border-radius: 4px; padding: 6px 8px; box-shadow: 0 2px 8px rgba(0,0,0,0.2); max-width: 640px;
       font-size: 12px; display: none; z-index: 10; white-space: normal; }
#tip b { font-size: 13px; }
.kv { display: grid; grid-template-columns: auto 1fr; column-gap: 10px; }
.kv span:nth-child(odd) { color: #666; }
pre.stack { margin: 4px 0 0 0; font: 11px/1.35 ui-monospace, "DejaVu Sans Mono", monospace; white-space: pre-wrap;
            word-break: break-all; }
section { padding: 8px 14px; }
table { border-collapse: collapse; font-size: 12px; }
th, td { padding: 2px 8px; text-align: left; border-bottom: 1px solid #eee; vertical-align: top; }
th { background: #f3f3f3; position: sticky; top: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
#details { min-height: 1.5em; }
canvas { display: block; }
"""
