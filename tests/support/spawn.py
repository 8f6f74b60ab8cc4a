"""Runs a function in N processes on loopback that form a torch.distributed group (2 by default).

Shared by the distributed tests and the distributed benchmarks (bench/benchmarks/allreduce_bench.py,
ddp_bench.py, demo_ddp.py import it as ``tests.support.spawn``). Every wait is bounded: a rank still
running at the deadline is killed and reported, never waited on forever.
"""

from __future__ import annotations

import os
import queue
import socket
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

WORLD = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, fn, args, backend, bind_device: bool, pg_timeout_s: float,
            results) -> None:
    import torch
    import torch.distributed as dist

    try:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        kwargs: dict[str, Any] = {} if backend is None else {"backend": backend}
        if bind_device:
            # init_process_group(device_id=...): the device is bound (eager connection, split_group)
            kwargs["device_id"] = torch.device("openreg", rank % torch.openreg.device_count())  # type: ignore[attr-defined]
        dist.init_process_group(rank=rank, world_size=world, timeout=timedelta(seconds=pg_timeout_s), **kwargs)
        try:
            value = fn(rank, *args)
        finally:
            dist.destroy_process_group()
        results.put((rank, True, value))
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put((rank, False, traceback.format_exc()))


def run(fn: Callable[..., Any], *args: Any, world: int = WORLD, backend: str | None = None,
        bind_device: bool = False, timeout_s: float = 120, pg_timeout_s: float = 20) -> list[Any]:
    """Runs ``fn(rank, *args)`` in ``world`` spawned processes, each in the group (``backend`` as
    init_process_group takes it; ``bind_device``: bound to openreg:rank). Returns each rank's value (None
    for a rank that ended without returning, as by ``os._exit(0)``); raises AssertionError with the
    tracebacks of the ranks that failed, or naming those still running after ``timeout_s``."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, fn, args, backend, bind_device, pg_timeout_s,
                                               results)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    got: dict[int, tuple[bool, Any]] = {}
    # Read the results while the ranks run: a rank cannot exit before the queue has taken its value.
    while len(got) < world and time.monotonic() < deadline:
        try:
            rank, ok, value = results.get(timeout=0.2)
        except queue.Empty:
            if not any(p.is_alive() for p in procs):
                try:  # what a rank put just before it exited
                    rank, ok, value = results.get(timeout=1)
                except queue.Empty:
                    break
            else:
                continue
        got[rank] = (ok, value)
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for r in hung:
        procs[r].kill()
        procs[r].join()
    failures = [f"rank {r}:\n{value}" for r, (ok, value) in sorted(got.items()) if not ok]
    assert not failures, "\n".join(failures)
    assert not hung, f"ranks {hung} still running after {timeout_s} s"
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return [got[r][1] if r in got else None for r in range(world)]
