"""The race checker and the host's use of pinned memory around non_blocking copies (Note [Host access to
pinned memory] in backend/sanitizer/Sanitizer.cpp): a non_blocking copy returns before it ran, so the
host may read its pinned destination or overwrite its pinned source only after a synchronization that
covers the copy. Each program runs in a subprocess because the checker is enabled once per process."""
import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import torch
N = 1 << 20
"""


def run(body, mode):
    env = {k: v for k, v in os.environ.items() if k != "OPENREG_SCHEDULE_FUZZ"}
    env["OPENREG_SANITIZER"] = mode
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


# The two programs of issue 24, item 6, each with the ops the report must name (host's, copy's).
RACES = {
    "host_reads_a_device_to_host_result_before_synchronizing": ("""
        d = torch.arange(N, device="openreg", dtype=torch.float32)
        d.mul_(2)
        h = torch.empty(N, pin_memory=True)
        h.copy_(d, non_blocking=True)
        total = h.sum()
        """, ["read by aten::sum on host thread", "write by aten::copy_ on stream 0 on openreg:0"]),
    "host_overwrites_the_pinned_source_of_a_pending_host_to_device_copy": ("""
        src = torch.ones(N, pin_memory=True)
        d = src.to("openreg", non_blocking=True)
        src.fill_(2)
        """, ["write by aten::fill_ on host thread", "read by aten::copy_ on stream 0 on openreg:0"]),
    "host_writes_the_source_through_indexing": ("""
        src = torch.ones(N, pin_memory=True)
        d = torch.empty(N, device="openreg")
        d.copy_(src, non_blocking=True)
        src[: N // 2] = 3
        """, ["write by aten::fill_ on host thread", "read by aten::copy_ on stream 0 on openreg:0"]),
    "host_reads_a_result_copied_on_a_side_stream_after_syncing_another": ("""
        d = torch.ones(N, device="openreg")
        side = torch.openreg.Stream()
        side.wait_stream(torch.openreg.current_stream())
        h = torch.empty(N, pin_memory=True)
        with torch.openreg.stream(side):
            h.copy_(d, non_blocking=True)
        torch.openreg.current_stream().synchronize()  # the wrong stream
        print(h.max())
        """, ["read by aten::max on host thread", "write by aten::copy_ on stream"]),
}


@pytest.mark.parametrize("name", sorted(RACES))
def test_report_mode_records_the_host_access(name):
    body, needles = RACES[name]
    r = run(textwrap.dedent(body) + "\nprint('FINISHED')\n", "report")
    assert r.returncode == 66, (r.returncode, r.stdout, r.stderr)
    assert "FINISHED" in r.stdout, r.stdout
    assert "1 stream race(s) found" in r.stderr, r.stderr
    assert "of pinned host memory" in r.stderr, r.stderr
    for needle in needles:
        assert needle in r.stderr, (needle, r.stderr)
    assert "synchronize the stream" in r.stderr, r.stderr


@pytest.mark.parametrize("name", sorted(RACES))
def test_raise_mode_raises_at_the_host_access(name):
    body, needles = RACES[name]
    wrapped = "try:\n" + textwrap.indent(textwrap.dedent(body), "    ") + textwrap.dedent("""
        except torch.AcceleratorError as e:
            assert e.error_code == torch.openreg.sanitizer.RACE_ERROR_CODE
            print("RAISED", str(e).replace(chr(10), " "))
        else:
            print("NOT RAISED")
        """)
    r = run(wrapped, "1")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "RAISED" in r.stdout and "NOT RAISED" not in r.stdout, (r.stdout, r.stderr)
    for needle in needles:
        assert needle in r.stdout, (needle, r.stdout)


# Correct programs: the host uses the pinned memory only after a synchronization that covers the copy.
CORRECT = {
    "device_synchronize": """
        d = torch.arange(N, device="openreg", dtype=torch.float32) * 2
        h = torch.empty(N, pin_memory=True)
        h.copy_(d, non_blocking=True)
        torch.openreg.synchronize()
        assert h.sum().item() == float(N) * (N - 1)
        """,
    "stream_synchronize": """
        d = torch.ones(N, device="openreg")
        h = d.to("cpu", non_blocking=True)
        torch.openreg.current_stream().synchronize()
        assert h.sum().item() == N
        """,
    "event_synchronize": """
        d = torch.ones(N, device="openreg")
        h = torch.empty(N, pin_memory=True)
        h.copy_(d, non_blocking=True)
        e = torch.openreg.Event()
        e.record()
        e.synchronize()
        assert h.sum().item() == N
        """,
    "event_query_returned_true": """
        d = torch.ones(N, device="openreg")
        h = torch.empty(N, pin_memory=True)
        h.copy_(d, non_blocking=True)
        e = torch.openreg.Event()
        e.record()
        while not e.query():
            pass
        assert h.sum().item() == N
        """,
    "overwrite_source_after_synchronize": """
        src = torch.ones(N, pin_memory=True)
        d = src.to("openreg", non_blocking=True)
        torch.openreg.synchronize()
        src.fill_(2)
        assert d.sum().item() == N
        """,
    "blocking_copies": """
        d = torch.ones(N, device="openreg")
        h = torch.empty(N, pin_memory=True)
        h.copy_(d)
        assert h.sum().item() == N
        h.fill_(3)
        d.copy_(h)
        h.fill_(4)
        assert d.sum().item() == 3 * N
        """,
    "other_pinned_buffers_and_reuse_of_a_freed_block": """
        for step in range(4):
            src = torch.full((N,), float(step), pin_memory=True)
            d = src.to("openreg", non_blocking=True)
            other = torch.zeros(N, pin_memory=True)
            other.add_(1)  # a pinned buffer no copy uses
            del src  # its block is freed only after the copy ran: a later owner is ordered after it
            torch.openreg.synchronize()
            assert d.sum().item() == step * N
        """,
    "host_writes_before_the_copy_is_issued": """
        src = torch.empty(N, pin_memory=True)
        src.fill_(5)
        d = src.to("openreg", non_blocking=True)
        torch.openreg.synchronize()
        assert d.sum().item() == 5 * N
        """,
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_programs_stay_clean(name):
    r = run(textwrap.dedent(CORRECT[name]) + "\nprint('FINISHED', len(torch.openreg.sanitizer.races()))\n", "report")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "FINISHED 0" in r.stdout, (r.stdout, r.stderr)
