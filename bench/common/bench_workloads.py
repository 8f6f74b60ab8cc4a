"""Workloads that more than one benchmark times: ops_bench and default_config_bench both report how far
small kernels overlap on two streams of one device and on two devices, each in its own table and with
its own statistic (best of 3, median of 3). One definition keeps the two figures measuring the same work.
"""

from __future__ import annotations


def small_kernel(torch, x):
    # Tens of microseconds on one thread (a 1-D cumsum is sequential): a kernel too small to use a device's
    # other cores, so any speedup can only come from running two of them at once.
    return torch.cumsum(x, 0)


def kernels_over_streams(torch, count):
    """Returns run(k): `count` small kernels issued round-robin over the first k (1 or 2) of two streams of
    the current openreg device, each stream on its own input, then waits for all of them. The time of
    run(1) over run(2) is the speedup two streams give."""
    xs = [torch.randn(1 << 16, device="openreg") for _ in range(2)]
    streams = [torch.openreg.Stream(), torch.openreg.Stream()]

    def run(k):
        for i in range(count):
            with torch.openreg.stream(streams[i % k]):
                small_kernel(torch, xs[i % k])
        torch.openreg.synchronize()

    return run


def kernels_over_devices(torch, count):
    """Returns run(k): `count` small kernels issued round-robin over the first k (1 or 2) of openreg:0 and
    openreg:1 (on their current streams), then waits for both devices. The time of run(1) over run(2) is
    the speedup a second device gives."""
    xs = [torch.randn(1 << 16, device=f"openreg:{d}") for d in (0, 1)]

    def run(k):
        for i in range(count):
            small_kernel(torch, xs[i % k])
        torch.openreg.synchronize(0)
        torch.openreg.synchronize(1)

    return run
