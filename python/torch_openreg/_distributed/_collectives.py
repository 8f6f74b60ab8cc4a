"""The collectives of the openreg group: c10d's method name -> gloo's method and its argument check
(_checks.py). ``install`` makes each a method of the group that goes through ``ProcessGroupOpenReg._run``
(_group.py), the single path every collective takes (the sanitizer hooks in there)."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from . import _checks as c

# gloo keeps the older names of torch 2.13's single-tensor collectives.
_COLLECTIVES: dict[str, tuple[str, Any]] = {
    "allreduce": ("allreduce", c._check_allreduce),
    "allreduce_coalesced": ("allreduce_coalesced", c._check_allreduce_coalesced),
    "broadcast": ("broadcast", c._check_rooted("broadcast")),
    "reduce": ("reduce", c._check_rooted("reduce")),
    "allgather": ("allgather", c._check_allgather),
    "_allgather_base": ("_allgather_base", c._check_allgather_base),
    "all_gather_single": ("_allgather_base", c._check_allgather_base),
    "allgather_coalesced": ("allgather_coalesced", None),
    "reduce_scatter": ("reduce_scatter", c._check_reduce_scatter),
    "_reduce_scatter_base": ("_reduce_scatter_base", c._check_reduce_scatter_base),
    "reduce_scatter_single": ("_reduce_scatter_base", c._check_reduce_scatter_base),
    "alltoall": ("alltoall", c._check_alltoall),
    "alltoall_base": ("alltoall_base", c._check_alltoall_base),
    "all_to_all_single": ("alltoall_base", c._check_alltoall_base),
    "gather": ("gather", c._check_rooted_list("gather", list_first=True)),
    "scatter": ("scatter", c._check_rooted_list("scatter", list_first=False)),
    "send": ("send", c._check_p2p("send")),
    "recv": ("recv", c._check_p2p("recv")),
    "recv_anysource": ("recv_anysource", None),
    "monitored_barrier": ("monitored_barrier", None),
}
# The coalesced single-tensor collectives (gloo has none): one gloo collective per (output, input)
# pair, issued in order by one job (one Work, one end). Name -> (gloo's method, options type).
_PAIRWISE: dict[str, tuple[str, Any]] = {
    "all_gather_single_coalesced": ("_allgather_base", dist.distributed_c10d.AllgatherOptions),
    "allgather_into_tensor_coalesced": ("_allgather_base", dist.distributed_c10d.AllgatherOptions),
    "reduce_scatter_single_coalesced": ("_reduce_scatter_base", dist.distributed_c10d.ReduceScatterOptions),
    "reduce_scatter_tensor_coalesced": ("_reduce_scatter_base", dist.distributed_c10d.ReduceScatterOptions),
}
# barrier is the group's own method (_group.py): an all_reduce on the device with a profile, as NCCL's.
# gloo's method -> the check of its arguments, made on the calling thread before the job is queued.
CHECKS = {gloo: check for gloo, check in _COLLECTIVES.values() if check is not None}


def _collective(name: str, gloo_name: str):
    """The group's method ``name``: gloo's ``gloo_name`` on CPU views, through the common path."""

    def method(self, *args, **kwargs):
        return self._run(name, [(gloo_name, args, kwargs)])

    method.__name__ = name
    return method


def _pairwise(name: str, gloo_name: str, options_type):
    def method(self, outputs, inputs, opts=None):
        opts = options_type() if opts is None else opts
        return self._run(name, [(gloo_name, (o, i, opts), None) for o, i in zip(outputs, inputs)])

    method.__name__ = name
    return method


def install(group_class: type) -> None:
    """Adds every collective of the tables to ``group_class`` as a method calling its ``_run``."""
    for name, (gloo_name, _) in _COLLECTIVES.items():
        setattr(group_class, name, _collective(name, gloo_name))
    for name, (gloo_name, options_type) in _PAIRWISE.items():
        setattr(group_class, name, _pairwise(name, gloo_name, options_type))
