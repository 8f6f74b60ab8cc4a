"""``python -m torch_openreg.viz``: the pictures of torch.openreg.viz from a shell."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import List, Optional

_DESCRIPTION = "Draws openreg's device timelines and memory snapshots as pictures that open offline."

_EPILOG = """examples:
  python -m torch_openreg.viz timeline run.json run.html        # zoomable, self-contained page
  python -m torch_openreg.viz timeline run.json run.png         # the whole trace in one PNG
  python -m torch_openreg.viz timeline run.json run.png --pages # run-01.png, ...: every op named
  python -m torch_openreg.viz timeline run.json step.png --pages --window-ms 4.8,9.7  # one step
  python -m torch_openreg.viz memory snap.pickle snap.html      # memory over time, stacks, segments
  python -m torch_openreg.viz memory snap.pickle snap.png [--x time]

run.json: written by `with torch.openreg.trace("run.json"):`; snap.pickle: by
torch.openreg.memory._dump_snapshot() after torch.openreg.memory._record_memory_history()."""


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_openreg.viz", description=_DESCRIPTION, epilog=_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    t = sub.add_parser("timeline", help="a device timeline (Chrome trace JSON from torch.openreg.trace)")
    t.add_argument("trace")
    t.add_argument("out", help="a .html page, or a .png picture")
    t.add_argument("--pages", action="store_true", help="PNG: pages with every op named (out-01.png, ...)")
    t.add_argument("--items-per-page", type=int, default=60, help="PNG pages: at most this many items each")
    t.add_argument("--window-ms", metavar="START,END",
                   help="only this part of the trace (ms from its start); the HTML page opens on it")
    t.add_argument("--title")
    m = sub.add_parser("memory", help="a memory snapshot (pickle from torch.openreg.memory._dump_snapshot)")
    m.add_argument("snapshot")
    m.add_argument("out", help="a .html page, or a .png picture")
    m.add_argument("--x", choices=["events", "time"], default="events", help="PNG: the x axis")
    m.add_argument("--title")
    args = parser.parse_args(argv)

    from . import memory_html, memory_png, timeline_html, timeline_png, timeline_pngs

    ext = os.path.splitext(args.out)[1].lower()
    if ext not in (".html", ".htm", ".png"):
        parser.error(f"{args.out}: the output must end in .html or .png")
    # Every argument is checked before any output is drawn, whatever its kind: a usage error (exit 2).
    window = None
    if args.what == "timeline":
        if args.items_per_page < 1:
            parser.error(f"--items-per-page: expected at least 1, got {args.items_per_page}")
        if args.window_ms is not None:
            try:
                start, end = (float(v) for v in args.window_ms.split(","))
            except ValueError:
                parser.error(f"--window-ms: expected START,END in ms, got {args.window_ms!r}")
            if not (math.isfinite(start) and math.isfinite(end) and end > start):
                parser.error(f"--window-ms: expected START,END with finite END > START (ms), got {args.window_ms!r}")
            window = (start, end)
    try:
        if args.what == "timeline":
            if ext == ".png":
                written = (timeline_pngs(args.trace, args.out, args.title, items_per_page=args.items_per_page,
                                         window_ms=window)
                           if args.pages else [timeline_png(args.trace, args.out, args.title, window_ms=window)])
            else:
                written = [timeline_html(args.trace, args.out, args.title, window_ms=window)]
        else:
            written = [memory_png(args.snapshot, args.out, args.title, x=args.x) if ext == ".png"
                       else memory_html(args.snapshot, args.out, args.title)]
    except (OSError, ValueError) as e:
        print(f"python -m torch_openreg.viz: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
