"""The reduction ops gloo lacks, AVG and PREMUL_SUM: gloo runs SUM, then the results are scaled on the
communication thread (_comm_queue.py), before the collective ends."""

from __future__ import annotations

import torch
import torch.distributed as dist


def _scale_of(opts, size: int):
    """(SUM options, scale) for AVG / PREMUL_SUM, which gloo lacks; (opts, None) otherwise."""
    op = getattr(opts, "reduceOp", None)
    if op is None:
        return opts, None
    if op == dist.ReduceOp.AVG:
        scale = ("avg", size)
    elif op == dist.ReduceOp.PREMUL_SUM:
        factor = op.factor
        if isinstance(factor, torch.Tensor):
            factor = factor.item()
        scale = ("mul", factor)
    else:
        return opts, None
    summed = type(opts)()
    for field in ("timeout", "rootRank", "rootTensor", "asyncOp"):
        if hasattr(opts, field):
            setattr(summed, field, getattr(opts, field))
    summed.reduceOp = dist.ReduceOp.SUM
    return summed, scale


def _apply_scale(views, scale) -> None:
    kind, value = scale
    for v in views:
        if kind == "mul":
            v.mul_(value)
        elif v.is_floating_point() or v.is_complex():
            v.div_(value)
        else:
            v.floor_divide_(value)  # integer AVG, as SUM // world
