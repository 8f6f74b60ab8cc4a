"""``torch.distributed.set_timeout`` for torch 2.13, which has it only as a method of the group.

Note [torch.distributed.set_timeout on torch 2.13]
torchtitan 0.3.0 (the release pinned for openreg's torchtitan tests, tests/ecosystem) lowers every
group's timeout after its first step with ``torch.distributed.set_timeout(timeout, group)``, a function of
torch releases after 2.13; on torch 2.13 that is an AttributeError on any device, CUDA's included.
torch 2.13 has the operation itself: ``ProcessGroup.set_timeout(timeout)`` sets the timeout of the
group's backends for the operations that follow. So where ``torch.distributed`` lacks the function,
openreg adds one that does exactly that for the group given, or the default group. It is the one name
openreg adds to torch's namespace; it is not added where torch has it, and it changes nothing else.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist


def _set_timeout(timeout: timedelta, group: dist.ProcessGroup | None = None) -> None:
    """Sets ``group``'s timeout (the default group's when None) for the operations that follow."""
    if not isinstance(timeout, timedelta):
        raise TypeError(f"timeout must be a datetime.timedelta, got {type(timeout).__name__}")
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    if dist.distributed_c10d._rank_not_in_group(group):
        raise ValueError("Invalid process group specified")
    group.set_timeout(timeout)


def install() -> None:
    """Adds ``torch.distributed.set_timeout`` where torch lacks it (Note [torch.distributed.set_timeout on
    torch 2.13])."""
    if not hasattr(dist, "set_timeout"):
        _set_timeout.__name__ = _set_timeout.__qualname__ = "set_timeout"
        dist.set_timeout = _set_timeout  # type: ignore[attr-defined]
