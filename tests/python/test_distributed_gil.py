"""A host thread that waits for the device never holds the GIL (Note [Host waits hold no GIL] in
sim/src/host_wait.cpp): a collective's communication thread takes the GIL to complete it, so a host that
slept on a full launch queue behind that collective with the GIL held waited forever (an FSDP2 sizing
run froze in AdamW's _foreach_addcmul_: ops on DTensors, FSDP2's parameters, are dispatched with the
GIL held)."""

from __future__ import annotations

import os
import subprocess
import sys

import torch
from support import spawn  # tests/support (pytest's pythonpath)

ROUNDS = 50


def _foreach_behind_a_pending_collective(rank, rounds):
    import time

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dev = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(dev)
    # DTensors, as FSDP2's parameters and gradients: their ops are dispatched with the GIL held.
    mesh = init_device_mesh("openreg", (2,))
    params = [distribute_tensor(torch.full((64, 64), 1.0, device=dev), mesh, [Shard(0)]) for _ in range(4)]
    grads = [distribute_tensor(torch.full((64, 64), 0.5, device=dev), mesh, [Shard(0)]) for _ in range(4)]
    total = torch.ones(16, device=dev)
    for _ in range(rounds):
        torch.openreg.synchronize()
        if rank == 1:
            time.sleep(0.05)  # rank 0's all_reduce waits for rank 1 meanwhile
        dist.all_reduce(total)  # the current stream waits for its end, device-side
        # OPENREG_LAUNCH_QUEUE_DEPTH=2: these fill rank 0's queue behind the pending all_reduce
        for _ in range(4):
            torch._foreach_addcmul_(params, grads, grads, value=0.25)
    torch.openreg.synchronize()
    return total[0].item(), params[0].to_local()[0, 0].item()


def test_a_launch_held_behind_a_pending_collective_does_not_hold_the_gil(monkeypatch):
    monkeypatch.setenv("OPENREG_LAUNCH_QUEUE_DEPTH", "2")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        results = spawn.run(_foreach_behind_a_pending_collective, ROUNDS, timeout_s=240)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    expected_param = 1.0 + ROUNDS * 4 * 0.25 * 0.5 * 0.5
    assert results == [(2.0**ROUNDS, expected_param)] * 2
