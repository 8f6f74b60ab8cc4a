"""Draws docs/design-layers.png, the picture of docs/design.md: `python3 docs/design_layers.py`."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

# (label, what it holds, reaches the sim, tier colour), top to bottom.
LAYERS = [
    ("torch_openreg/", "torch.openreg, c10d backend, Inductor, autoload", False, "#dbe9f6"),
    ("python/csrc", "bindings (no logic)", False, "#dbe9f6"),
    ("registration/", "device guard, PrivateUse1 hooks", False, "#fde9d9"),
    ("profiler/", "Kineto activity, legacy stubs", False, "#fde9d9"),
    ("ops/", "kernels: copy_, factories, views, resize, conv, RNN", False, "#fde9d9"),
    ("engine/", "plan, policy, shape pass, async/sync paths, launch", True, "#fde9d9"),
    ("sanitizer/", "stream race checker", False, "#fde9d9"),
    ("memory/", "device allocator, block cache, host allocator, caches", True, "#fde9d9"),
    ("runtime/", "devices, streams, events, errors, exit, fork, waits", True, "#fde9d9"),
    ("sim/", "devices (oneTBB lanes), streams, events, copy engines", False, "#e2f0d9"),
]


def main() -> None:
    fig, ax = plt.subplots(figsize=(10, 7.2))
    ax.set_xlim(0, 11)
    ax.set_ylim(0, len(LAYERS) * 1.0 + 0.4)
    ax.axis("off")
    top = len(LAYERS)
    for i, (name, what, sim, colour) in enumerate(LAYERS):
        y = top - i - 0.8
        ax.add_patch(FancyBboxPatch((1.6, y), 7.0, 0.62, boxstyle="round,pad=0.04", fc=colour, ec="#555"))
        ax.text(1.8, y + 0.31, name, va="center", fontsize=11, fontweight="bold", family="monospace")
        ax.text(3.9, y + 0.31, what, va="center", fontsize=9)
        if sim:
            ax.annotate("", xy=(8.7, 0.45), xytext=(8.7, y + 0.31),
                        arrowprops={"arrowstyle": "->", "color": "#2a7a2a", "lw": 1.2,
                                    "connectionstyle": "arc,angleA=0,angleB=0,armA=25,armB=25,rad=6"})
        if i + 1 < len(LAYERS):
            ax.annotate("", xy=(1.25, y - 0.35), xytext=(1.25, y + 0.3),
                        arrowprops={"arrowstyle": "->", "color": "#444", "lw": 1.0})
    ax.text(9.35, 2.6, "the only layers\nthat include\n<openreg/sim/...>", fontsize=9, color="#2a7a2a")
    for label, y0, y1 in (("python", top - 2 - 0.2, top + 0.0), ("backend", 1.0, top - 2 - 0.25),
                          ("sim", 0.15, 0.9)):
        ax.text(0.1, (y0 + y1) / 2, label, rotation=90, va="center", fontsize=11, color="#333")
        ax.plot([0.55, 0.55], [y0 + 0.1, y1 - 0.1], color="#999", lw=2)
    ax.text(1.6, top + 0.15, "Each layer includes only itself and the layers below it "
            "(tests/support/check_tiers.py)", fontsize=9, color="#333")
    out = Path(__file__).with_name("design-layers.png")
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(out)


if __name__ == "__main__":
    main()
