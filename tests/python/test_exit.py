"""A Python program that exits with work still queued on several streams and devices exits 0, cleanly.

The runtime drains queued work at exit in C++ (Note [Teardown at exit] in sim/src/runtime.cpp); the
package's atexit hook only calls that drain, so no device work runs while the interpreter finalizes.
Work queued after that hook ran (by an atexit hook registered before torch was imported, which runs
later) is drained by the C++ handler before the static objects it uses are destroyed. The C++
counterparts are tests/cpp/sim/exit_test.cpp and tests/cpp/backend/teardown_test.cpp.
"""

import pytest
import torch

# Each stream gets a chain of kernels, a bandwidth-limited copy into pinned memory and more kernels, so
# work is certainly still queued when the snippet ends.
QUEUE_WORK = """
def queue_work(torch):
    streams = []
    for d in range(2):
        for s in range(3):
            stream = torch.openreg.Stream(device=d)
            streams.append(stream)
            with torch.openreg.stream(stream):
                x = torch.full((96, 96), 1.0, device=f"openreg:{d}")
                back = torch.empty(1 << 20, pin_memory=True)
                for _ in range(40):
                    x = torch.sort(torch.sin(x @ x).cumsum(0), dim=1).values.div_(96)
                back.copy_(torch.ones(1 << 20, device=f"openreg:{d}"), non_blocking=True)
                for _ in range(40):
                    x = (x @ x).div_(96)
    return streams
"""

CLEAN_EXIT_ENV = {"OPENREG_DEVICE_COUNT": "2", "OPENREG_COPY_BANDWIDTH": "200M"}


def assert_clean_exit(proc, check_ok):
    check_ok(proc)
    for sign in ("terminate", "Segmentation", "Fatal", "Abort", "ThreadSanitizer", "AddressSanitizer"):
        assert sign not in proc.stderr, proc.stderr


def test_returning_with_work_queued_exits_cleanly(run_python, check_ok):
    proc = run_python(QUEUE_WORK + "import torch\nqueue_work(torch)\nprint('queued', flush=True)\n",
                      env=CLEAN_EXIT_ENV)
    assert_clean_exit(proc, check_ok)
    assert proc.stdout.strip() == "queued"


def test_the_package_hook_drains_before_the_interpreter_finalizes(run_python, check_ok):
    # An atexit hook registered before torch is imported runs after the package's: by then every
    # stream is idle.
    code = QUEUE_WORK + """
import atexit

streams = []

def check_idle():
    import torch
    print("idle" if all(s.query() for s in streams) else "busy", flush=True)

atexit.register(check_idle)
import torch
streams.extend(queue_work(torch))
streams.extend(torch.openreg.default_stream(d) for d in range(2))
"""
    proc = run_python(code, env=CLEAN_EXIT_ENV)
    assert_clean_exit(proc, check_ok)
    assert proc.stdout.strip() == "idle"


@pytest.mark.parametrize("also_at_exit", [False, True], ids=["late_work", "late_work_after_main_work"])
def test_work_queued_after_the_package_hook_is_drained_in_cpp(run_python, check_ok, also_at_exit):
    # Registered before torch is imported, so it runs after the package's own hook, which drained
    # already: what it queues is left to the C++ drain at exit().
    code = QUEUE_WORK + f"""
import atexit

def late():
    import torch
    queue_work(torch)
    print("late work queued", flush=True)

atexit.register(late)
import torch
if {also_at_exit}:
    queue_work(torch)
"""
    proc = run_python(code, env=CLEAN_EXIT_ENV)
    assert_clean_exit(proc, check_ok)
    assert proc.stdout.strip() == "late work queued"


def test_the_drain_waits_for_every_stream_of_every_device():
    import torch_openreg._registration as registration
    from torch_openreg import _C

    # The package keeps no drain of its own: its atexit hook is the C++ one.
    assert not hasattr(registration, "_drain_devices_at_exit")
    streams = []
    for d in range(min(2, torch.openreg.device_count())):
        for _ in range(2):
            stream = torch.openreg.Stream(device=d)
            streams.append(stream)
            with torch.openreg.stream(stream):
                x = torch.ones(64, 64, device=f"openreg:{d}")
                for _ in range(20):
                    x = (x @ x).div_(64)
    _C._drain_at_exit()  # idempotent and callable any time: it only waits
    assert all(s.query() for s in streams)
