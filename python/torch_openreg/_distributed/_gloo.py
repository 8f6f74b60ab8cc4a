"""The group's inner gloo group, and what c10d asks it on the openreg group's behalf.

Note [split_group on openreg]
c10d's ``dist.split_group`` works on a group bound to a device, and c10d binds the device given as
``init_process_group(device_id=)`` to the ProcessGroup it made, not to the group a Python plugin returns
in its place. It then asks "the backend of the accelerator" (the group's ``_get_backend``: the inner gloo,
a ``_Gloo``) whether it can split, deep-copies its options, and calls the parent group's ``split_group``.
So: c10d's eager connection of the bound device (``_Gloo.eager_connect_single_device``, called only when
a device is bound) binds it to our group; ``_Gloo.options`` are gloo's options in a subclass that
``copy.deepcopy`` can copy (gloo's own cannot be pickled); and ``ProcessGroupOpenReg.split_group``
(_group.py) is the split: a new openreg group, over a new gloo group that rendezvouses under the parent's
store, on the ranks of the split; the others get None and wait for nobody. The store prefix is the
parent's split count, not the name c10d gives the child (which counts the groups each rank belongs to,
so it differs between ranks after a split that left one out). A bound device also makes c10d ask every
later group for a backend on it; a ``new_group(backend="gloo")`` has one, since gloo serves openreg
devices (Note [openreg tensors in c10d's gloo groups] in _gloo_groups.py). DeviceMesh takes the split
path on a bound group (as with NCCL).
"""

from __future__ import annotations

import weakref
from datetime import timedelta
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from ._address import gloo_device
from ._device import BACKEND_NAME

if TYPE_CHECKING:
    from ._group import ProcessGroupOpenReg


class _GlooOptions(dist.ProcessGroupGloo._Options):  # type: ignore[name-defined]
    """gloo's options, copyable by ``copy.deepcopy`` (c10d's split_group deep-copies the parent's; the
    C++ class cannot be pickled, so it cannot be deep-copied)."""

    @classmethod
    def of(cls, src) -> _GlooOptions:
        copy = cls()
        copy._timeout = src._timeout
        copy._threads = src._threads
        copy._devices = list(src._devices)  # gloo's transport devices are shared between groups
        copy.global_ranks_in_group = list(src.global_ranks_in_group)
        copy.group_name = src.group_name
        return copy

    def __deepcopy__(self, memo) -> _GlooOptions:
        return _GlooOptions.of(self)


class _Gloo(dist.ProcessGroupGloo):
    """The group's inner gloo group. c10d takes it for the group's backend on every device (see
    ProcessGroupOpenReg._get_backend), and asks it two things on the openreg device's behalf:
    - ``eager_connect_single_device(device)``: called by init_process_group / new_group when a device
      is bound (``device_id=``). c10d binds the device to the ProcessGroup it created, not to the group
      a Python plugin returns, so the binding is made here: split_group needs it.
    - ``options``: deep-copied by split_group for the child's options (see _GlooOptions).
    """

    def __init__(self, store, rank: int, size: int, timeout: timedelta, owner: ProcessGroupOpenReg) -> None:
        device = gloo_device(store, rank, size, timeout)  # Note [Which address gloo listens on]
        if device is None:
            super().__init__(store, rank, size, timeout)
        else:
            opts = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
            opts._devices = [device]
            opts._timeout = timeout
            opts._threads = 2  # what gloo's constructor from a timeout gives one device
            super().__init__(store, rank, size, opts)
        self._owner = weakref.ref(owner)  # the group owns this one: no cycle

    @property
    def options(self) -> _GlooOptions:
        return _GlooOptions.of(super().options)

    # torch.distributed._time_estimator asks the group's backend: the owner answers from the virtual
    # clock's cost model (Note [Collectives on the virtual clock] in _clock.py), with a device profile.
    @property
    def supports_time_estimate(self) -> bool:
        from ._clock import enabled

        return enabled()

    def _start_time_estimate(self) -> None:
        owner = self._owner()
        if owner is None or not self.supports_time_estimate:
            raise NotImplementedError("openreg distributed: collective time estimates need a device profile")
        owner._start_time_estimate()

    def _end_time_estimate(self) -> float:
        owner = self._owner()
        return owner._end_time_estimate() if owner is not None else 0.0

    def eager_connect_single_device(self, device) -> None:
        owner = self._owner()
        if owner is not None and device is not None and torch.device(device).type == BACKEND_NAME:
            owner.bound_device_id = torch.device(device)
        super().eager_connect_single_device(device)

