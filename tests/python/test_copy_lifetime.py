"""Copies and fills that are still pending when Python lets go of their tensors.

Work items keep the host memory they touch alive and never hold tensors (Note [Work items hold CPU
aliases, not tensors] in backend/engine/AsyncPath.cpp): a device thread that dropped the last reference to a
tensor Python had released would take the GIL, and at interpreter exit abort the process. A freed device
block is reused only by later work on its own stream (Note [Stream-ordered device memory] in
backend/memory/DeviceAllocator.cpp), so pending work on it stays correct. The exit tests run in a
subprocess with a copy bandwidth limit, so that plenty of work is certainly pending when it exits.
"""

import textwrap

import pytest
import torch

# Slow enough that the copies below are still queued when the snippet reaches its end. Each snippet
# issues many small work items whose tensors Python drops at once, so that items keep finishing (and,
# before the fix, dropping Python's tensors on device threads) while the interpreter shuts down.
PENDING_AT_EXIT_ENV = {"OPENREG_COPY_BANDWIDTH": "1G"}

EXIT_WITH_PENDING_WORK = {
    "copy_and_fill": """
        a = torch.ones(1 << 16, device="openreg")
        for _ in range(2000):
            b = torch.empty_like(a)
            b.copy_(a)
            c = torch.empty(1 << 10, device="openreg")
            c.fill_(1.0)
    """,
    "strided_kernel_copies": """
        a = torch.ones(128, 128, device="openreg")
        for _ in range(2000):
            b = torch.empty_like(a)
            b.copy_(a)
            c = torch.empty(128, 128, device="openreg", dtype=torch.float64)
            c.copy_(a.t())
    """,
    "non_blocking_pinned": """
        host = torch.ones(1 << 16).pin_memory()
        for _ in range(2000):
            dev = torch.empty(1 << 16, device="openreg")
            dev.copy_(host, non_blocking=True)
            back = torch.empty(1 << 16, pin_memory=True)
            back.copy_(dev, non_blocking=True)
    """,
    "peer_copies": """
        a = torch.ones(1 << 16, device="openreg:0")
        for _ in range(1000):
            b = a.to("openreg:1")
            c = torch.empty(1 << 8, 1 << 8, device="openreg:1", dtype=torch.float64)
            c.copy_(a.view(1 << 8, 1 << 8).t())
    """,
    "complex_conj_copies": """
        a = torch.ones(1 << 14, dtype=torch.complex64, device="openreg")
        for _ in range(1000):
            b = torch.empty_like(a)
            b.copy_(a)
            c = torch.empty_like(a)
            c.copy_(a.conj())
            d = torch.empty(1 << 14, dtype=torch.complex128, device="openreg:1")
            d.copy_(torch._neg_view(a))
    """,
}


@pytest.mark.parametrize("snippet", EXIT_WITH_PENDING_WORK.values(), ids=EXIT_WITH_PENDING_WORK.keys())
def test_exit_with_pending_work_is_clean(run_python, check_ok, snippet):
    proc = run_python("import torch\n" + textwrap.dedent(snippet), env=PENDING_AT_EXIT_ENV)
    check_ok(proc)
    assert "terminate" not in proc.stderr


def test_non_blocking_copies_outlive_the_source_tensors():
    n = 1 << 16
    host = torch.arange(n, dtype=torch.float32).pin_memory()
    dev = torch.empty(n, device="openreg")
    dev.copy_(host, non_blocking=True)
    del host  # the pending H2D copy keeps the pinned memory alive
    back = torch.empty(n, pin_memory=True)
    back.copy_(dev, non_blocking=True)
    del dev  # ... and the device block is reused only by work queued after the D2H copy
    torch.openreg.synchronize()
    assert torch.equal(back, torch.arange(n, dtype=torch.float32))


def test_peer_copy_outlives_the_source_tensor():
    src = torch.arange(4096, dtype=torch.float64, device="openreg:0")
    dst = torch.empty(64, 64, device="openreg:1", dtype=torch.float32)
    dst.copy_(src.view(64, 64).t())
    del src
    assert torch.equal(dst.cpu(), torch.arange(4096, dtype=torch.float64).view(64, 64).t().float())


def test_pending_copy_ignores_later_metadata_changes():
    a = torch.arange(12.0).view(3, 4)
    dev = torch.zeros(4, 3, device="openreg")
    dev.copy_(a.t().to("openreg"))  # a kernel copy (transposed source)
    dev.t_()  # changes dev's metadata only; the copy above already wrote in the old layout
    assert torch.equal(dev.cpu(), a)
