"""Argument checks on the calling thread, before a collective is queued.

Note [Argument checks at the call]
gloo checks a collective's arguments when it is handed the collective, which here is on the group's
communication thread (Note [Stream-ordered collectives] in _comm_queue.py): its errors would surface only
as a failed collective at the next synchronize of the stream that waits on it. The checks below run
first, on the caller's thread, before anything is queued, and raise what NCCL raises at the call for the
tensor forms (TypeError for a dtype, ValueError for a size) and gloo's RuntimeError and message for the
rest. Every rank makes the same bad call, so no rank issues it and the group stays in step.

Each check takes the group and gloo's arguments (c10d passes them positionally).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _fail(op: str, msg: str, kind: type[Exception] = RuntimeError) -> None:
    raise kind(f"openreg distributed {op}: {msg}")


def _check_root(op: str, root: int, size: int) -> None:
    if not 0 <= root < size:
        _fail(op, f"invalid root rank: {root} (group size {size})")


def _check_peer(op: str, peer: int, size: int) -> None:
    if not 0 <= peer < size:
        _fail(op, f"invalid peer rank: {peer} (group size {size})")


def _check_like(op: str, tensors, ref: torch.Tensor, what: str = "tensor") -> None:
    """Every tensor has ``ref``'s dtype and shape (gloo's 'invalid tensor type/size at index')."""
    for i, t in enumerate(tensors):
        if t.dtype != ref.dtype:
            _fail(op, f"invalid {what} type at index {i} (expected {ref.dtype}, got {t.dtype})", TypeError)
        if t.shape != ref.shape:
            _fail(op, f"invalid {what} size at index {i} (expected {tuple(ref.shape)}, got {tuple(t.shape)})")


def _check_count(op: str, tensors, size: int, what: str) -> None:
    if len(tensors) != size:
        _fail(op, f"{what} has {len(tensors)} tensors, expected {size} (the group size)")


def _check_reduce_op(op: str, tensors, opts) -> None:
    red = getattr(opts, "reduceOp", None)
    if red is None:
        return
    # red == b, not red in (...): a RedOpType compares unequal to the ReduceOp in the options
    for name in ("BAND", "BOR", "BXOR"):
        if red == getattr(dist.ReduceOp, name) and any(t.is_floating_point() or t.is_complex() for t in tensors):
            _fail(op, f"Cannot use ReduceOp.{name} with non-integral dtype")


def _check_allreduce(pg, tensors, opts=None, *_) -> None:
    if not tensors:
        _fail("allreduce", "requires non-empty tensor list")
    _check_like("allreduce", tensors, tensors[0])
    _check_reduce_op("allreduce", tensors, opts)


def _check_allreduce_coalesced(pg, tensors, opts=None, *_) -> None:
    _check_reduce_op("allreduce_coalesced", tensors, opts)
    if len({t.dtype for t in tensors}) > 1:
        _fail("allreduce_coalesced", "tensors must all have the same type", TypeError)


def _check_rooted(op: str):
    def check(pg, tensors, opts, *_) -> None:
        _check_root(op, opts.rootRank, pg.size())
        _check_reduce_op(op, tensors, opts)

    return check


def _check_allgather(pg, output_lists, inputs, *_) -> None:
    if len(output_lists) != 1 or len(inputs) != 1:
        _fail("allgather", "requires a single-element output list and a single input tensor")
    _check_count("allgather", output_lists[0], pg.size(), "the output list")
    _check_like("allgather", output_lists[0], inputs[0], "output tensor")


def _check_reduce_scatter(pg, outputs, input_lists, opts=None, *_) -> None:
    if len(outputs) != 1 or len(input_lists) != 1:
        _fail("reduce_scatter", "requires a single output tensor and a single-element input list")
    _check_count("reduce_scatter", input_lists[0], pg.size(), "the input list")
    _check_like("reduce_scatter", input_lists[0], outputs[0], "input tensor")
    _check_reduce_op("reduce_scatter", outputs, opts)


def _check_world_sized(op: str, gather: bool, type_msg: str, size_msg: str):
    """all_gather_into_tensor (output = group size x input) and reduce_scatter_tensor (input = group
    size x output), with NCCL's messages and exception types."""

    def check(pg, output, inp, opts=None, *_) -> None:
        big, small = (output, inp) if gather else (inp, output)
        if output.dtype != inp.dtype:
            _fail(op, type_msg, TypeError)
        if big.numel() != small.numel() * pg.size():
            _fail(op, f"{size_msg} ({big.numel()} != {pg.size()} * {small.numel()})", ValueError)
        _check_reduce_op(op, [output], opts)

    return check


_check_allgather_base = _check_world_sized(
    "all_gather_into_tensor", True, "output tensor must have the same type as input tensor",
    "output tensor size must be equal to world_size times input tensor size")
_check_reduce_scatter_base = _check_world_sized(
    "reduce_scatter_tensor", False, "input tensor must be the same type as the output tensor.",
    "input tensor must be the same size as output size times world size")


def _check_splits(op: str, t: torch.Tensor, splits, size: int, what: str) -> None:
    if not splits:
        if t.dim() == 0 or t.size(0) % size != 0:
            _fail(op, f"{what} tensor's dim 0 does not divide equally across group size {size}")
        return
    if len(splits) != size:
        _fail(op, f"number of {what} splits ({len(splits)}) not equal to group size {size}")
    if t.dim() == 0 or sum(splits) != t.size(0):
        _fail(op, f"{what} split sizes {list(splits)} do not add up to dim 0 size "
                  f"{t.size(0) if t.dim() else 0}")


def _check_alltoall_base(pg, output, inp, out_splits, in_splits, *_) -> None:
    if output.dtype != inp.dtype:
        _fail("all_to_all_single", "input and output tensors must have the same type", TypeError)
    _check_splits("all_to_all_single", output, out_splits, pg.size(), "output")
    _check_splits("all_to_all_single", inp, in_splits, pg.size(), "input")
    if not out_splits and not in_splits and output.numel() != inp.numel():
        _fail("all_to_all_single", f"input and output tensors must have the same size with even splits "
                                   f"({inp.numel()} and {output.numel()} elements)", ValueError)


def _check_alltoall(pg, outputs, inputs, *_) -> None:
    _check_count("all_to_all", outputs, pg.size(), "the output list")
    _check_count("all_to_all", inputs, pg.size(), "the input list")
    for o, i in zip(outputs, inputs):
        if o.dtype != i.dtype:
            _fail("all_to_all", "input and output tensors must have the same type", TypeError)


def _check_rooted_list(op: str, list_first: bool):
    """gather (the root's list of outputs is the first argument) and scatter (its list of inputs is the
    second): the root has one tensor per rank, like the other side's single tensor; the others none."""
    listed, single = ("output", "input") if list_first else ("input", "output")

    def check(pg, first, second, opts, *_) -> None:
        lists, singles = (first, second) if list_first else (second, first)
        _check_root(op, opts.rootRank, pg.size())
        if len(singles) != 1:
            _fail(op, f"requires a single {single} tensor")
        if pg.rank() == opts.rootRank:
            if len(lists) != 1:
                _fail(op, f"requires a single-element {listed} list on the root")
            _check_count(op, lists[0], pg.size(), f"the {op} list")
            _check_like(op, lists[0], singles[0], f"{listed} tensor")
        elif any(len(x) for x in lists):
            _fail(op, f"requires empty {listed} on non-root ranks", ValueError)

    return check


def _check_p2p(op: str):
    def check(pg, tensors, peer, *_) -> None:
        if len(tensors) != 1:
            _fail(op, f"requires a single tensor, got {len(tensors)}")
        _check_peer(op, peer, pg.size())

    return check
