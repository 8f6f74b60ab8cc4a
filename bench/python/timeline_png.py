"""Renders a device timeline (Chrome trace JSON written by torch.openreg.trace) to a PNG Gantt chart.

    python bench/python/timeline_png.py run.json run.png [--title "..."]

One horizontal lane per (device, stream); bars coloured by item kind (kernel, copy, collective, event
wait, ...). Consecutive kernels of a lane alternate two shades, so back-to-back kernels stay apart; a
lane that only carries collectives (torch.distributed's communication lane) is labelled so. The legend
sits outside the plot, so it never covers the timeline's end.
"""

from __future__ import annotations

import argparse
import json
from typing import Optional

_KERNEL_ALT = "#7F9FCF"  # every other kernel of a lane
_COLOURS = {
    "kernel": "#4C72B0",
    "collective": "#CCB974",
    "copy": "#DD8452",
    "host_callback": "#55A868",
    "event_record": "#8172B3",
    "event_wait": "#C44E52",
}


def render(trace_path: str, png_path: str, title: Optional[str] = None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    with open(trace_path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    for e in events:  # collectives are traced as host-completed items named "collective:<op>"
        if e.get("name", "").startswith("collective:"):
            e["cat"] = "collective"
    lanes = sorted({(e["pid"], e["tid"]) for e in events})
    comm_lanes = {lane for lane in lanes if all(e["cat"] == "collective" for e in events if (e["pid"], e["tid"]) == lane)}
    index = {lane: i for i, lane in enumerate(lanes)}
    height = max(2.0, 0.45 * len(lanes) + 1.2)
    # Items too short to see (host callbacks take no device time) get a sliver of the timeline's span,
    # not a fixed width: a virtual-time timeline (torch.openreg.timing) spans microseconds.
    span_ms = (max((e["ts"] + e["dur"] for e in events), default=0) - min((e["ts"] for e in events), default=0)) / 1e3
    min_width = max(span_ms, 1e-6) / 1000
    fig, ax = plt.subplots(figsize=(12, height))
    for kind, colour in _COLOURS.items():
        bars = sorted((e for e in events if e.get("cat") == kind), key=lambda e: e["ts"])
        for lane in lanes:
            spans = [(e["ts"] / 1e3, max(e["dur"] / 1e3, min_width)) for e in bars if (e["pid"], e["tid"]) == lane]
            if spans:
                colours = [_KERNEL_ALT if kind == "kernel" and i % 2 else colour for i in range(len(spans))]
                ax.broken_barh(spans, (index[lane] - 0.4, 0.8), facecolors=colours, edgecolor="none")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"openreg:{d} " + ("communication" if (d, s) in comm_lanes else "default" if s == 0
                                            else f"stream {s}") for d, s in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", alpha=0.3)
    present = sorted({e.get("cat") for e in events} & set(_COLOURS))
    ax.legend(handles=[Patch(color=_COLOURS[k], label=k.replace("_", " ")) for k in present],
              loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize="small")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="Chrome trace JSON written by torch.openreg.trace")
    parser.add_argument("png", help="output PNG path")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()
    print(render(args.trace, args.png, args.title))


if __name__ == "__main__":
    main()
