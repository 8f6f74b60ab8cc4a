"""Renders a device timeline (Chrome trace JSON written by torch.openreg.trace) to a PNG Gantt chart.

    python -m bench.common.timeline_png run.json run.png [--title "..."] [--pages]

One horizontal lane per (device, stream); bars coloured by item kind (kernel, copy, collective, event
wait, ...), back-to-back kernels in alternating shades, op names on the bars wide enough for them, the
legend outside the plot. ``--pages`` writes run-01.png, run-02.png, ... instead: pages of at most 60 items
with every op named. The drawing is torch.openreg.viz's (``python -m torch_openreg.viz`` also writes a
zoomable HTML timeline); this script keeps the benchmarks' own entry point.
"""

from __future__ import annotations

import argparse
from typing import Optional

from torch_openreg.openreg.viz import timeline_png, timeline_pngs


def render(trace_path: str, png_path: str, title: Optional[str] = None) -> str:
    """Draws the whole trace into ``png_path`` and returns it."""
    return timeline_png(trace_path, png_path, title)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="Chrome trace JSON written by torch.openreg.trace")
    parser.add_argument("png", help="output PNG path")
    parser.add_argument("--title", default=None)
    parser.add_argument("--pages", action="store_true", help="pages with every op named: PNG-01.png, ...")
    args = parser.parse_args()
    if args.pages:
        print("\n".join(timeline_pngs(args.trace, args.png, args.title)))
    else:
        print(render(args.trace, args.png, args.title))


if __name__ == "__main__":
    main()
