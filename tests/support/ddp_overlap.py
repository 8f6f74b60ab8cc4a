"""DDP's gradient all-reduce overlapping backward, read from the device timeline (torch.openreg.trace).

Shared by tests/python/test_distributed_groups.py (which asserts the overlap) and the DDP benchmark and
demo (bench/benchmarks/ddp_bench.py, bench/demos/demo_ddp.py, which print it). Only the order of the
recorded spans is used, never their lengths: a span of the communication lane overlaps a backward
kernel when each starts before the other ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ALLREDUCE = "collective:allreduce"


def deep_mlp(width: int = 256, depth: int = 6) -> torch.nn.Module:
    """Enough layers that a small ``bucket_cap_mb`` gives DDP several buckets, and enough backward
    work after the first bucket that its all-reduce has kernels to overlap."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    layers.append(torch.nn.Linear(width, 1))
    return torch.nn.Sequential(*layers)


def bucket_cap_mb_for(model: torch.nn.Module, layers_per_bucket: int = 1) -> float:
    """A DDP bucket cap that holds about ``layers_per_bucket`` of ``model``'s largest layers."""
    largest = max(p.numel() * p.element_size() for p in model.parameters())
    return layers_per_bucket * largest / (1024 * 1024)


@dataclass
class Overlap:
    allreduces: int  # all-reduce spans on the communication lane
    backward_kernels: int  # kernel spans on compute streams
    overlapping_allreduces: int  # all-reduces with a backward kernel inside their span
    first_allreduce_before_backward_ends: bool  # the first all-reduce started while backward ran
    overlap_ns: int  # time during which an all-reduce and a backward kernel both ran (for the figure)
    comm_ns: int  # time during which an all-reduce ran

    def describe(self) -> str:
        share = self.overlap_ns / self.comm_ns if self.comm_ns else 0.0
        return (f"{self.allreduces} gradient all-reduces on the communication lane, "
                f"{self.overlapping_allreduces} of them overlapping backward kernels "
                f"({share:.0%} of all-reduce time ran beside backward compute)")


def _union(spans):
    merged: list[list[int]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return merged


def _length(spans) -> int:
    return sum(e - s for s, e in spans)


def _intersection(a, b):
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def overlap(records, device: int) -> Overlap:
    """The overlap of all-reduce spans with kernel spans of ``device`` in a trace of one backward pass."""
    comm = [(r.start_ns, r.end_ns) for r in records if r.device == device and r.name == ALLREDUCE]
    comm_lanes = {r.stream for r in records if r.device == device and r.name == ALLREDUCE}
    kernels = [(r.start_ns, r.end_ns) for r in records
               if r.device == device and r.kind == "kernel" and r.stream not in comm_lanes]
    overlapping = sum(1 for cs, ce in comm if any(ks < ce and cs < ke for ks, ke in kernels))
    comm_u, kern_u = _union(comm), _union(kernels)
    return Overlap(
        allreduces=len(comm),
        backward_kernels=len(kernels),
        overlapping_allreduces=overlapping,
        first_allreduce_before_backward_ends=bool(comm and kernels) and min(comm)[0] < max(e for _, e in kernels),
        overlap_ns=_length(_intersection(comm_u, kern_u)),
        comm_ns=_length(comm_u),
    )


def traced_backward(model, x: torch.Tensor, y: torch.Tensor, device: torch.device, path: str | None = None):
    """Forward (finished first), then one traced backward of a DDP ``model``: the timeline's records."""
    om = torch.openreg  # type: ignore[attr-defined]
    loss = torch.nn.functional.mse_loss(model(x), y)
    om.synchronize(device)  # the trace holds backward's work only
    with om.trace(path) as tr:
        loss.backward()
    return tr.records
