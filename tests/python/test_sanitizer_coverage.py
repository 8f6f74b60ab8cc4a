"""The stream race checker beyond eager ops: compiled kernels (torch.compile), collectives
(torch.distributed on openreg) and the exact bytes of strided views. Each program runs in a subprocess
(the checker is enabled once per process), as in test_sanitizer.py."""
import os
import subprocess
import sys
import textwrap

import pytest
from test_sanitizer import ROOT, run


def assert_race(r, *needles):
    assert r.returncode != 0, r.stdout + r.stderr
    assert "stream race" in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


def assert_clean(r, expect=None):
    assert r.returncode == 0 and "stream race" not in r.stderr, r.stdout + r.stderr
    if expect is not None:
        assert expect in r.stdout, r.stdout + r.stderr


# --- strided views (Note [Exact bytes of a strided view] in backend/sanitizer/Sanitizer.cpp) ------------

def test_interleaved_views_written_on_two_streams_are_not_a_race():
    r = run("""
        x = torch.zeros(1000, device="openreg")
        m = torch.zeros(64, 64, device="openreg")
        torch.accelerator.synchronize()
        x[::2].fill_(1)                      # even elements on the default stream
        m[:, 0].fill_(1)                     # a column
        m[:, 2:4].fill_(3)                   # two other columns (fills are queued: no host wait)
        with side:
            x[1::2].fill_(2)                 # odd elements on the side stream: disjoint bytes
            x[1::2].add_(x[1::2])
            m[:, 1].copy_(torch.arange(64.0, device="openreg"))
            m[:, 4:].t().zero_()
        cur().wait_stream(side)
        print("sum", x.sum().item(), m.sum().item())
        """, mode="report")
    assert_clean(r, "sum 2500.0 2464.0")


@pytest.mark.parametrize("body, needles", [
    ("""
        x[::2].fill_(1)
        with side:
            x[::3].fill_(2)                  # shares elements 0, 6, 12, ... with x[::2]
        """, ["write by aten::fill_", "Float[334]", "Float[500]"]),
    ("""
        m[:, 1].fill_(1)
        with side:
            s = m[7].sum()                   # row 7 holds m[7, 1]
        """, ["read by aten::sum", "write by aten::fill_"]),
    ("""
        m.t()[3:5].fill_(2)                  # columns 3 and 4, through a transposed view
        with side:
            m[:, 4::8].add_(1)               # column 4 again
        """, ["write by aten::add_", "write by aten::fill_", "Float[2, 16]"]),
])
def test_overlapping_strided_views_are_a_race(body, needles):
    r = run(textwrap.dedent("""
        x = torch.zeros(1000, device="openreg")
        m = torch.zeros(16, 16, device="openreg")
        torch.accelerator.synchronize()
        """) + textwrap.dedent(body))
    assert_race(r, *needles)


# --- compiled kernels (Note [Compiled kernels in the race checker] in python/torch_openreg/_inductor) ---

COMPILED = """
@torch.compile
def f(x, y):
    return (x * 2 + y).relu()

@torch.compile
def g(x):
    x.add_(1)                                # a mutated input: written by the kernel
    return x.sum()

x = torch.randn(1000, device="openreg")
y = torch.randn(1000, device="openreg")
f(x, y); g(x)
torch.accelerator.synchronize()
"""


def test_compiled_kernel_reading_a_side_streams_write_without_wait_is_a_race():
    r = run(COMPILED + textwrap.dedent("""
        with side:
            x.mul_(3)
        z = f(x, y)
        """))
    assert_race(r, "read by cpp_fused_", "write by aten::mul_", "in <module>")


def test_compiled_kernel_mutating_an_input_another_stream_reads_is_a_race():
    r = run(COMPILED + textwrap.dedent("""
        with side:
            s = x.sum()
        g(x)
        """))
    assert_race(r, "write by cpp_fused_", "read by aten::sum")


def test_correct_compiled_programs_run_clean():
    r = run(COMPILED + textwrap.dedent("""
        side.wait_stream(cur())
        with side:
            x.mul_(3)
            z = f(x, y)
            g(x)
        cur().wait_stream(side)
        print("f", f(x, y).sum().item() >= 0, "g", g(x).item() != 0)

        # A compiled training step (Adam: CPU step counters next to device kernels).
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to("openreg")
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        @torch.compile
        def step(inp):
            loss = m(inp).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
        for _ in range(3):
            loss = step(torch.randn(16, 8, device="openreg"))
        print("loss", loss.item() >= 0)
        """), mode="report")
    assert_clean(r, "f True g True")
    assert "loss True" in r.stdout


# --- collectives (Note [Collectives in the race checker] in backend/sanitizer/Sanitizer.cpp) ------------

DIST = """
import torch.distributed as dist
dist.init_process_group("openreg", store=dist.HashStore(), rank=0, world_size=1)
t = torch.zeros(1000, device="openreg")
torch.accelerator.synchronize()
"""


def test_collective_input_written_on_a_side_stream_without_wait_is_a_race():
    r = run(DIST + textwrap.dedent("""
        with side:
            t.fill_(1)
        dist.all_reduce(t)
        """))
    assert_race(r, "write by allreduce on the collective lane on openreg:0", "write by aten::fill_",
                "on stream 1 on openreg:0")


def test_collective_output_used_before_waiting_for_it_is_a_race():
    r = run(DIST + textwrap.dedent("""
        out = torch.empty(1000, device="openreg")
        work = dist.all_gather_into_tensor(out, t, async_op=True)
        s = out.sum()                         # no work.wait()
        """))
    assert_race(r, "read by aten::sum", "write by all_gather_single on the collective lane")


def test_correct_collective_programs_run_clean():
    r = run(DIST + textwrap.dedent("""
        with side:
            t.fill_(1)
        cur().wait_stream(side)
        dist.all_reduce(t)                    # waits (device-side) for the collective
        t.add_(1)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        t.mul_(2)
        fut = dist.all_reduce(t, async_op=True).get_future()
        fut.wait()
        out = [torch.empty_like(t)]
        dist.all_gather(out, t)
        dist.barrier()
        print("value", t[0].item(), out[0][0].item())
        dist.destroy_process_group()
        """), mode="report")
    assert_clean(r, "value 4.0 4.0")


def test_ddp_tests_run_clean_under_the_checker():
    # The two-process DDP tests: every rank inherits OPENREG_SANITIZER=report and would exit with status
    # 66 on a race, which the tests' own exit-code check turns into a failure.
    env = dict(os.environ, OPENREG_SANITIZER="report")
    env.pop("OPENREG_SCHEDULE_FUZZ", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           os.path.join(ROOT, "tests", "python", "test_distributed.py"), "-k", "ddp"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert " passed" in r.stdout and "stream race" not in r.stdout + r.stderr, r.stdout


def test_race_completed_through_an_op_openreg_runs_synchronously_is_reported():
    """An in-place op on a non-contiguous view runs on openreg's synchronous path (the host waits for
    the stream), but on CUDA it is asynchronous: that internal wait must not order the host, or the
    side stream's unsynchronized read below would go unreported."""
    r = run("""
        m = torch.zeros(64, 64, device="openreg")
        torch.accelerator.synchronize()
        m[:, 3:5].mul_(2)                    # default stream, synchronous path on openreg
        with side:
            s = m.sum()                      # reads m without waiting for the default stream
        torch.accelerator.synchronize()
        """, mode="report")
    assert_race(r, "read by aten::sum", "aten::mul_")
