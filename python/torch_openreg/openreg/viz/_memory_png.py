"""The memory picture as a PNG: allocated memory over time, an allocation per band, coloured by stream."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Union

from ._common import PathLike, check_output, format_bytes, write_figure
from ._memory_model import (
    DeviceMemory,
    Snapshot,
    device_memory,
    load_snapshot,
    shade,
    stream_label,
)
from ._timeline_png import _pyplot


def x_of(dm: DeviceMemory, x: str) -> Callable[[float], float]:
    """Step -> x coordinate: the step itself ("events") or ms since the first recorded event ("time")."""
    if x == "events" or dm.times[0] is None or any(t is None for t in dm.times):
        return lambda k: float(k)
    times = [float(t) for t in dm.times]  # type: ignore[arg-type]  # no None: checked above

    def at(k: float) -> float:
        return (times[min(int(k), len(times) - 1)] - times[0]) / 1e3

    return at


def _polygon(dm: DeviceMemory, a: Any, xf: Callable[[float], float]) -> List[tuple]:
    end = a.end if a.end is not None else dm.steps + 1
    bottom = []
    for i, (k, off) in enumerate(a.offsets):
        nxt = a.offsets[i + 1][0] if i + 1 < len(a.offsets) else end
        bottom += [(xf(k), off), (xf(nxt), off)]
    top = [(x, off + a.size) for x, off in reversed(bottom)]
    return bottom + top


def byte_step(top: float, ticks: int = 8) -> float:
    """A tick spacing for a bytes axis up to ``top``: a round number of KiB, MiB or GiB (1, 2, 5, 10, 20,
    25, 50, ... of the largest unit that ``top`` holds twice), giving at most ``ticks`` ticks."""
    unit = 1.0
    while top / (unit * 1024) >= 2 and unit < 1024.0 ** 4:
        unit *= 1024
    for m in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000):
        if top / (m * unit) <= ticks:
            return m * unit
    return 1024 * unit


def _axes_format(ax: Any, top: float, integer_x: bool) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator

    ax.yaxis.set_major_locator(MultipleLocator(byte_step(top)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v) if v else "0"))
    if integer_x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def memory_png(snapshot: Union[Snapshot, PathLike], png: PathLike, title: Optional[str] = None, *,
               x: str = "events", width: float = 14.0, dpi: int = 110, max_allocations: int = 3000) -> str:
    """Draws the allocated memory of a snapshot over its recorded history as a PNG at ``png``, a panel per
    device: each allocation is a band as high as its size, from its allocation to its free, stacked so
    that the top edge is ``memory_allocated()`` at each moment; colours tell the streams apart (shades of
    one colour tell neighbouring allocations of a stream apart); a dashed line shows the memory reserved
    by the caching allocator. ``snapshot``: ``torch.openreg.memory._snapshot()`` or the path of the pickle
    ``_dump_snapshot`` wrote (record it after ``torch.openreg.memory._record_memory_history()``). ``x``:
    ``"events"`` (the recorded allocations and frees, in order; Note [Allocated memory over time]) or
    ``"time"`` (the host's clock, ms). Returns the path written."""
    if x not in ("events", "time"):
        raise ValueError(f"x must be 'events' or 'time', got {x!r}")
    from matplotlib.collections import PolyCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    out = check_output(png, "torch.openreg.viz.memory_png")
    devices = device_memory(load_snapshot(snapshot), max_allocations)
    plt = _pyplot()
    panels = max(1, len(devices))
    fig, axes = plt.subplots(panels, 1, figsize=(width, 0.6 + 3.6 * panels), dpi=dpi, squeeze=False)
    try:
        if not devices:
            axes[0][0].text(0.5, 0.5, "no memory allocated and no history recorded: call\n"
                            "torch.openreg.memory._record_memory_history() before the work",
                            ha="center", va="center", transform=axes[0][0].transAxes)
            axes[0][0].set_axis_off()
        for ax, dm in zip((row[0] for row in axes), devices):
            _panel(ax, dm, x, PolyCollection, Line2D, Patch)
        if title:
            fig.suptitle(title, fontsize=11, x=0.01, ha="left")
        fig.tight_layout(rect=(0, 0, 1, 0.97 if title else 1))
        write_figure(fig, out, dpi, "torch.openreg.viz.memory_png")
    finally:
        plt.close(fig)
    return out


def _panel(ax: Any, dm: DeviceMemory, x: str, PolyCollection: Any, Line2D: Any, Patch: Any) -> None:  # noqa: N803
    xf = x_of(dm, x)
    polys = [_polygon(dm, a, xf) for a in dm.allocations]
    colours = [shade(a.stream, a.order) for a in dm.allocations]
    ax.add_collection(PolyCollection(polys, facecolors=colours, edgecolors="none"))
    xs = [xf(k) for k in range(dm.steps + 2)]
    if dm.merged:
        ax.fill_between(xs, dm.merged_base + dm.merged_base[-1:], dm.allocated + dm.allocated[-1:], step="post",
                        facecolor="#d9d9d9", edgecolor="#999999", hatch="///", linewidth=0)
    ax.step(xs, dm.reserved + dm.reserved[-1:], where="post", color="#333333", linestyle="--", linewidth=1)
    peak, at = dm.peak
    ax.plot([xf(at)], [peak], marker="v", color="#C44E52", markersize=6)
    ax.set_xlim(xs[0], xs[-1])
    top = max(max(dm.reserved), peak, 1) * 1.06
    ax.set_ylim(0, top)
    _axes_format(ax, top, integer_x=x == "events" or dm.times[0] is None)
    ax.grid(alpha=0.3)
    ax.set_axisbelow(True)
    xlabel = ("time since the first recorded event (ms, host clock)" if x == "time" and dm.times[0] is not None
              else "allocator events (each allocation and free, in order)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("bytes")
    n = len(dm.allocations) + dm.merged
    history = f"{dm.steps} allocations and frees recorded" if dm.history else "no history recorded"
    ax.set_title(f"openreg:{dm.device}: {format_bytes(dm.allocated[-1])} allocated at the snapshot, peak "
                 f"{format_bytes(peak)} (red mark), {format_bytes(dm.reserved[-1])} reserved; {n} allocations, "
                 f"{history}", fontsize=9.5, loc="left")
    handles = [Patch(color=shade(i, 0), label=stream_label(dm, i)) for i in range(len(dm.streams))]
    handles.append(Line2D([], [], color="#333333", linestyle="--", label="reserved"))
    if dm.merged:
        handles.append(Patch(facecolor="#d9d9d9", edgecolor="#999999", hatch="///",
                             label=f"{dm.merged} smaller allocations"))
    ax.legend(handles=handles, loc="upper left", fontsize="small", framealpha=0.9)
