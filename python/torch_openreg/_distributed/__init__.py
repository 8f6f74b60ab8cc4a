"""torch.distributed on openreg: the ``openreg`` c10d backend, gloo driving zero-copy CPU views.

Registered at import (autoload) with ``Backend.register_backend("openreg", ..., devices=["openreg"])``;
registration only records a factory, so nothing is created until ``init_process_group`` runs.
``init_process_group()`` with no backend named then uses it for openreg tensors, and
``"cpu:gloo,openreg:openreg"`` names it explicitly.

The modules, one concept each:
- _group: ProcessGroupOpenReg, its one issue path ``_run`` (Note [openreg collectives over gloo])
- _collectives: the table of collectives (c10d's method -> gloo's method and its argument check)
- _checks: the argument checks made at the call (Note [Argument checks at the call])
- _comm_queue: a collective's job and the group's communication threads (Note [Stream-ordered collectives])
- _work: the Works handed back to c10d
- _gloo: the inner gloo group and what c10d asks it (Note [split_group on openreg])
- _address: the address that gloo listens on (Note [Which address gloo listens on])
- _gloo_groups: c10d's own gloo groups on openreg devices (Note [openreg tensors in c10d's gloo groups])
- _views: openreg tensors as zero-copy CPU views for gloo
- _reduce_ops: AVG and PREMUL_SUM, which gloo lacks
- _symmetric: symmetric-rank mode, one process per role of a large job (Note [Symmetric-rank mode])
- _device: the device type's name, torch.openreg and the backend's per-device streams
"""

from __future__ import annotations

import torch.distributed as dist

from . import _gloo_groups, _symmetric, _torch_compat
from ._device import BACKEND_NAME
from ._group import ProcessGroupOpenReg

__all__ = ["BACKEND_NAME", "ProcessGroupOpenReg", "register"]


def _create(opts, backend_options) -> ProcessGroupOpenReg:
    # The extended API hands us the group's name: c10d does not name a Python group it returns as the
    # whole process group, and DeviceMesh/functional collectives resolve groups by name.
    if _symmetric.layout() is not None:  # python -m torch_openreg.symmetric (Note [Symmetric-rank mode])
        pg: ProcessGroupOpenReg = _symmetric.SymmetricProcessGroup(
            opts.store, opts.group_rank, opts.group_size, opts.timeout, list(opts.global_ranks_in_group))
    else:
        pg = ProcessGroupOpenReg(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    pg._set_group_name(opts.group_id)
    return pg


def register() -> None:
    """Registers the backend name with c10d (records a factory only), and gloo for openreg devices."""
    _gloo_groups.register()
    _torch_compat.install()
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=[BACKEND_NAME])
    if _symmetric.layout() is not None:
        # A stand-in's gloo group of N ranks would wait for N processes: CPU tensors go to the openreg
        # group too, as they do whenever it is the default group (Note [Symmetric-rank mode]).
        dist.Backend.default_device_backend_map["cpu"] = BACKEND_NAME
