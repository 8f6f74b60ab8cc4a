"""Pictures of openreg's timelines and memory that open offline.

    torch.openreg.viz.timeline_html("run.json", "run.html")     # zoomable timeline, one self-contained file
    torch.openreg.viz.timeline_pngs("run.json", "run.png")      # run-01.png, ...: pages with every op named
    torch.openreg.viz.timeline_png("run.json", "run.png")       # the whole trace in one PNG
    torch.openreg.viz.memory_html("snap.pickle", "snap.html")   # memory over time, stacks on hover, segments
    torch.openreg.viz.memory_png("snap.pickle", "snap.png")     # memory over time by allocation and stream

The timelines read the Chrome trace JSON that ``torch.openreg.trace`` writes; the memory views read
``torch.openreg.memory._snapshot()`` or the pickle ``_dump_snapshot`` writes. Every HTML page has its
script, style and data inline and loads nothing from a network. From a shell:
``python -m torch_openreg.viz --help``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._memory_html import memory_html
    from ._memory_png import memory_png
    from ._timeline_html import timeline_html
    from ._timeline_png import timeline_png, timeline_pngs

__all__ = ["memory_html", "memory_png", "timeline_html", "timeline_png", "timeline_pngs"]

# `import torch` imports this package (torch.openreg.viz): the renderers load on first use, so that
# costs nothing until a picture is drawn.
_HOME = {"memory_html": "_memory_html", "memory_png": "_memory_png", "timeline_html": "_timeline_html",
         "timeline_png": "_timeline_png", "timeline_pngs": "_timeline_png"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'torch.openreg.viz' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
