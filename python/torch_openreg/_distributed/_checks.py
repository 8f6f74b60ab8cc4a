"""Argument checks on the calling thread, before a collective is queued.

Note [Argument checks at the call]
gloo checks a collective's arguments when it is handed the collective, which here is on the group's
communication thread (Note [Stream-ordered collectives] in _comm_queue.py): its errors would surface only
as a failed collective at the next synchronize of the stream that waits on it. The checks below run
first, on the caller's thread, before anything is queued, and raise what NCCL raises at the call for the
tensor forms (TypeError for a dtype, ValueError for a size) and gloo's RuntimeError and message for the
rest. Every rank makes the same bad call, so no rank issues it and the group stays in step.

Only what c10d's front end (torch/distributed/distributed_c10d.py, torch 2.13) leaves to the backend is
checked here. Before calling the group, c10d already
- hands over one tensor where gloo wants one (all_reduce, broadcast, reduce, send, recv; the input of
  all_gather, gather, reduce_scatter; the output of scatter) and one list where gloo wants one
  (``[tensor_list]``); functional collectives and DDP's reducer do the same;
- requires one dtype across the tensors of all_gather, reduce_scatter, gather, scatter, all_to_all and
  all_to_all_single (``_ensure_all_tensors_same_dtype``, ValueError);
- requires gather's and scatter's lists on the root and nowhere else (``_validate_output_list_for_rank``,
  and scatter's own check; ValueError).
It checks no list length against the group size, no shape, no split size, no root or peer given as a
group rank or in the default group (``_canonicalize_group_rank`` looks up only a subgroup's global
ranks), no reduction op against a dtype, and no dtype of all_gather_into_tensor, reduce_scatter_tensor
or of all_reduce_coalesced as the coalescing manager issues it: those are checked below.

Each check takes the group and gloo's arguments (c10d passes them positionally).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _fail(op: str, msg: str, kind: type[Exception] = RuntimeError) -> None:
    raise kind(f"openreg distributed {op}: {msg}")


def _check_rank(op: str, role: str, rank: int, size: int) -> None:
    """A root or peer rank is a rank of the group (gloo's 'invalid root rank' / 'invalid peer rank')."""
    if not 0 <= rank < size:
        _fail(op, f"invalid {role} rank: {rank} (group size {size})")


def _check_count(op: str, tensors, size: int, what: str) -> None:
    if len(tensors) != size:
        _fail(op, f"{what} has {len(tensors)} tensors, expected {size} (the group size)")


def _check_per_rank_lists(op: str, lists, singles, size: int, list_name: str, tensor_name: str) -> None:
    """Each list holds one tensor per rank, each of the shape of the single tensor on the other side
    (gloo's 'invalid ... size at index'; c10d checked the dtypes)."""
    for tensors, ref in zip(lists, singles):
        _check_count(op, tensors, size, list_name)
        for i, t in enumerate(tensors):
            if t.shape != ref.shape:
                _fail(op, f"invalid {tensor_name} size at index {i} "
                          f"(expected {tuple(ref.shape)}, got {tuple(t.shape)})")


def _check_reduce_op(op: str, tensors, opts) -> None:
    red = getattr(opts, "reduceOp", None)
    if red is None:
        return
    # red == b, not red in (...): a RedOpType compares unequal to the ReduceOp in the options
    for name in ("BAND", "BOR", "BXOR"):
        if red == getattr(dist.ReduceOp, name) and any(t.is_floating_point() or t.is_complex() for t in tensors):
            _fail(op, f"Cannot use ReduceOp.{name} with non-integral dtype")


def _check_allreduce(pg, tensors, opts=None, *_) -> None:
    _check_reduce_op("allreduce", tensors, opts)


def _check_allreduce_coalesced(pg, tensors, opts=None, *_) -> None:
    _check_reduce_op("allreduce_coalesced", tensors, opts)
    # c10d's all_reduce_coalesced checks this (ValueError), its coalescing manager does not.
    if len({t.dtype for t in tensors}) > 1:
        _fail("allreduce_coalesced", "tensors must all have the same type", TypeError)


def _check_rooted(op: str):
    """broadcast and reduce: the root is a rank of the group; reduce's op suits the dtype."""

    def check(pg, tensors, opts, *_) -> None:
        _check_rank(op, "root", opts.rootRank, pg.size())
        _check_reduce_op(op, tensors, opts)

    return check


def _check_allgather(pg, output_lists, inputs, *_) -> None:
    _check_per_rank_lists("allgather", output_lists, inputs, pg.size(), "the output list", "output tensor")


def _check_reduce_scatter(pg, outputs, input_lists, opts=None, *_) -> None:
    _check_per_rank_lists("reduce_scatter", input_lists, outputs, pg.size(), "the input list", "input tensor")
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
    _check_splits("all_to_all_single", output, out_splits, pg.size(), "output")
    _check_splits("all_to_all_single", inp, in_splits, pg.size(), "input")
    if not out_splits and not in_splits and output.numel() != inp.numel():
        _fail("all_to_all_single", f"input and output tensors must have the same size with even splits "
                                   f"({inp.numel()} and {output.numel()} elements)", ValueError)


def _check_alltoall(pg, outputs, inputs, *_) -> None:
    _check_count("all_to_all", outputs, pg.size(), "the output list")
    _check_count("all_to_all", inputs, pg.size(), "the input list")


def _check_rooted_list(op: str, list_first: bool):
    """gather (the root's list of outputs is the first argument) and scatter (its list of inputs is the
    second): the root is a rank of the group, and on it the list has one tensor per rank, each of the
    shape of the single tensor on the other side."""
    listed = "output" if list_first else "input"

    def check(pg, first, second, opts, *_) -> None:
        lists, singles = (first, second) if list_first else (second, first)
        _check_rank(op, "root", opts.rootRank, pg.size())
        if pg.rank() == opts.rootRank:
            _check_per_rank_lists(op, lists, singles, pg.size(), f"the {op} list", f"{listed} tensor")

    return check


def _check_p2p(op: str):
    def check(pg, tensors, peer, *_) -> None:
        _check_rank(op, "peer", peer, pg.size())

    return check
