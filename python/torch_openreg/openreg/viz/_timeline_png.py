"""PNG timelines: one picture of a whole trace, or pages of it with every op named."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._common import PathLike, check_output, format_us, fspath, write_figure
from ._trace_model import KERNEL_ALT, Lane, Timeline, clip, colour, load_trace, pages, text_colour, time_unit

# Fixed margins (inches) around the plot, so the plot's width in pixels, and with it which names fit on
# their bars, is known before anything is drawn; the PNG is exactly width x height inches at dpi.
_LEFT, _RIGHT, _TOP, _BOTTOM = 2.0, 1.45, 0.45, 0.55
_LANE_GAP = 0.25  # rows (data units) between two lanes
_FONT = 7.5  # points, op names


def _short(name: str) -> str:
    """An op's name as the PNGs write it: without the "aten::" every ATen op's name starts with (the
    figure says so), which leaves room on narrow bars for the part that tells ops apart."""
    return name[6:] if name.startswith("aten::") else name


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: never a window, works without a display
    import matplotlib.pyplot as plt

    return plt


class _Layout:
    """Where each lane's rows sit on the y axis (data units, one per row, top to bottom)."""

    def __init__(self, lanes: List[Lane]) -> None:
        self.row_y: Dict[Tuple[int, int], float] = {}
        self.lane_mid: List[float] = []
        y = 0.0
        for li, lane in enumerate(lanes):
            top = y
            for ri in range(max(1, len(lane.rows))):
                self.row_y[(li, ri)] = y
                y += 1.0
            self.lane_mid.append((top + y) / 2)
            y += _LANE_GAP
        self.height = max(y - _LANE_GAP, 1.0)


def _figure(lanes: List[Lane], row_inches: float, width: float, dpi: int) -> Tuple[Any, Any, _Layout, float]:
    plt = _pyplot()
    layout = _Layout(lanes)
    plot_h = layout.height * row_inches
    height = plot_h + _TOP + _BOTTOM
    fig = plt.figure(figsize=(width, height), dpi=dpi)
    ax = fig.add_axes((_LEFT / width, _BOTTOM / height, (width - _LEFT - _RIGHT) / width, plot_h / height))
    ax.set_ylim(layout.height, 0)
    plot_w_px = (width - _LEFT - _RIGHT) * dpi
    return fig, ax, layout, plot_w_px


def _text_size(fig: Any) -> Callable[[str, float], Tuple[float, float]]:
    """(width, height) in pixels of a text at a font size, as the figure's renderer draws it."""
    from matplotlib.font_manager import FontProperties

    renderer = fig.canvas.get_renderer()
    cache: Dict[Tuple[str, float], Tuple[float, float]] = {}

    def size(text: str, points: float) -> Tuple[float, float]:
        key = (text, points)
        if key not in cache:
            w, h, _ = renderer.get_text_width_height_descent(text, FontProperties(size=points), ismath=False)
            cache[key] = (w, h)
        return cache[key]

    return size


def _fit(text: str, room_px: float, points: float, size: Callable[[str, float], Tuple[float, float]]) -> str:
    """``text``, or its longest prefix ending in "…", that is at most ``room_px`` wide ("" if none is)."""
    if size(text, points)[0] <= room_px:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # longest n with text[:n] + "…" fitting
        mid = (lo + hi + 1) // 2
        if size(text[:mid] + "…", points)[0] <= room_px:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + "…" if lo >= 3 else ""


def _draw(fig: Any, ax: Any, timeline: Timeline, layout: _Layout, plot_w_px: float, t0: float, t1: float,
          bar_frac: float, names_below: bool) -> None:
    """Draws every item overlapping [t0, t1] (µs) with its name on its bar where it fits and, with
    ``names_below``, rotated under its bar where it does not (as long as it does not touch the previous
    name of its row)."""
    from matplotlib.ticker import FuncFormatter

    span = max(t1 - t0, 1e-9)
    px = plot_w_px / span  # pixels per µs
    size = _text_size(fig)
    room_below = (1.0 - bar_frac - 0.11) * (fig.get_size_inches()[1] - _TOP - _BOTTOM) / layout.height * fig.dpi
    for li, lane in enumerate(timeline.lanes):
        for ri, row in enumerate(lane.rows):
            y = layout.row_y[(li, ri)] + 0.06
            last_label_px = -1e9
            spans, fills = [], []
            for n, item in enumerate(row):
                if item.end < t0 or item.start > t1:
                    continue
                fill = KERNEL_ALT if item.kind == "kernel" and n % 2 else colour(item.kind)
                width_us = max(item.dur, 1.0 / px)  # at least a pixel: a host callback takes no device time
                spans.append((item.start, width_us))
                fills.append(fill)
                left_px = (max(item.start, t0) - t0) * px
                bar_px = (min(item.end, t1) - max(item.start, t0)) * px
                label = _fit(_short(item.name), bar_px - 4, _FONT, size) if bar_px > 14 else ""
                if label:
                    ax.text(max(item.start, t0) + 2 / px, y + bar_frac / 2, label, fontsize=_FONT, va="center",
                            ha="left", color=text_colour(fill), clip_on=True)
                    last_label_px = left_px + bar_px
                elif names_below:
                    # Upright under its bar; pushed right of the previous name when they would touch (a
                    # thin line then joins it to its bar), and left out if that is too far from the bar.
                    centre_px = left_px + bar_px / 2
                    line_px = size("Ag", _FONT)[1]
                    at_px = max(centre_px, last_label_px + 1 + line_px / 2)
                    label = _fit(_short(item.name), room_below, _FONT, size)
                    if label and at_px - centre_px <= 2 * line_px:
                        ax.text(t0 + at_px / px, y + bar_frac + 0.07, label, fontsize=_FONT, rotation=90,
                                va="top", ha="center", color="#222222", clip_on=True)
                        if at_px > centre_px + 0.5:
                            ax.plot([t0 + centre_px / px, t0 + at_px / px], [y + bar_frac, y + bar_frac + 0.065],
                                    color="#888888", linewidth=0.6, clip_on=True)
                        last_label_px = at_px + line_px / 2
            if spans:
                ax.broken_barh(spans, (y, bar_frac), facecolors=fills, edgecolor="none")
    unit, scale = time_unit(span)
    ax.set_xlim(t0, t1)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / scale:.6g}"))
    ax.set_xlabel(f"time ({unit}, from the trace's start); op names without \"aten::\"")
    ax.set_yticks(layout.lane_mid)
    ax.set_yticklabels([lane.label for lane in timeline.lanes], fontsize=8.5)
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    _legend(ax, {i.kind for i in timeline.items if i.end >= t0 and i.start <= t1})


def _legend(ax: Any, kinds_present: Any) -> None:
    from matplotlib.patches import Patch

    kinds = sorted(kinds_present)
    if kinds:
        ax.legend(handles=[Patch(color=colour(k), label=k.replace("_", " ")) for k in kinds],
                  loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize="small", frameon=False)


def _empty(ax: Any) -> None:
    ax.text(0.5, 0.5, "no device work in this trace", transform=ax.transAxes, ha="center", va="center")
    ax.set_yticks([])


def timeline_png(trace: PathLike, png: PathLike, title: Optional[str] = None, *, width: float = 14.0,
                 dpi: int = 110, window_ms: Optional[Tuple[float, float]] = None) -> str:
    """Draws the whole trace at ``trace`` (Chrome trace JSON from ``torch.openreg.trace``) as one PNG at
    ``png``: a lane per device and stream, items coloured by kind, back-to-back kernels in alternating
    shades, each op's name on its bar where it fits. ``width`` is in inches; each lane's row is 0.4 inch
    high; ``window_ms=(start, end)`` draws only that part (ms from the trace's start). For per-op detail
    of a long trace use :func:`timeline_pngs` or :func:`timeline_html`. Returns the path written."""
    out = check_output(png, "torch.openreg.viz.timeline_png")
    timeline = clip(load_trace(trace), window_ms)
    fig, ax, layout, plot_w_px = _figure(timeline.lanes, 0.4, width, dpi)
    try:
        if timeline.items:
            t0, t1 = (window_ms[0] * 1e3, window_ms[1] * 1e3) if window_ms else (timeline.start, timeline.end)
            pad = (t1 - t0) * 0.005
            _draw(fig, ax, timeline, layout, plot_w_px, t0 - pad, t1 + pad, 0.8, False)
        else:
            _empty(ax)
        ax.set_title(title or os.path.basename(timeline.path), fontsize=10, loc="left")
        write_figure(fig, out, dpi, "torch.openreg.viz.timeline_png")
    finally:
        _pyplot().close(fig)
    return out


def page_paths(png: PathLike, count: int) -> List[str]:
    """The files :func:`timeline_pngs` writes for ``count`` pages: ``run.png`` gives ``run-01.png``, ..."""
    stem, ext = os.path.splitext(fspath(png))
    digits = max(2, len(str(count)))
    return [f"{stem}-{n:0{digits}d}{ext or '.png'}" for n in range(1, count + 1)]


def timeline_pngs(trace: PathLike, png: PathLike, title: Optional[str] = None, *, items_per_page: int = 60,
                  width: float = 16.0, dpi: int = 110, window_ms: Optional[Tuple[float, float]] = None) -> List[str]:
    """Draws the trace at ``trace`` as pages of at most ``items_per_page`` items each, with every op's name:
    on its bar where it fits, else written upright under it. Pages are cut where no device is busy when
    they can be (a host synchronization, the end of a step). ``png`` names the files: ``run.png`` writes
    ``run-01.png``, ``run-02.png``, ... ``window_ms=(start, end)``: only the items that overlap that part
    of the trace (ms from its start; one training step, say). Returns the paths written, in time order."""
    timeline = clip(load_trace(trace), window_ms)
    windows = pages(timeline, items_per_page) or [(0.0, 0.0, 0)]
    paths = page_paths(png, len(windows))
    for out in paths:  # every page's destination before the first is drawn
        check_output(out, "torch.openreg.viz.timeline_pngs")
    plt = _pyplot()
    for n, ((t0, t1, count), out) in enumerate(zip(windows, paths), start=1):
        fig, ax, layout, plot_w_px = _figure(timeline.lanes, 1.5, width, dpi)
        try:
            if count:
                pad = max(t1 - t0, 1e-3) * 0.01
                _draw(fig, ax, timeline, layout, plot_w_px, t0 - pad, t1 + pad, 0.22, True)
            else:
                _empty(ax)
            name = title or os.path.basename(timeline.path)
            ax.set_title(f"{name}: page {n} of {len(windows)}, {format_us(t0)} to {format_us(t1)}, "
                         f"{count} items", fontsize=10, loc="left")
            write_figure(fig, out, dpi, "torch.openreg.viz.timeline_pngs")
        finally:
            plt.close(fig)
    return paths
