"""Ctrl-C during a host wait raises KeyboardInterrupt at once, and the process stays usable.

A host thread waiting for openreg work (synchronize of a device, stream or event, .item(), a copy to
the host) runs Python's signal handlers while it sleeps (Note [Interruptible host waits] in
sim/src/host_wait.cpp). The queued work is not cancelled: a later synchronize waits for it and its
results are right. Each case queues seconds of matmuls, sends SIGINT once the child is waiting, and
checks that the wait ended while that work was still pending.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

TIMEOUT_S = 120  # a hung child fails the test instead of stalling the suite

WAITS = {
    "torch.openreg.synchronize": "torch.openreg.synchronize()",
    "torch.accelerator.synchronize": "torch.accelerator.synchronize()",
    "Stream.synchronize": "torch.openreg.current_stream().synchronize()",
    "Event.synchronize": "done.synchronize()",
    "torch.Event.synchronize": "generic.synchronize()",
    "item": "y.sum().item()",
    "copy_to_host": "y.cpu()",
}

CHILD = """
import sys, time, torch

x = torch.randn(1024, 1024, device="openreg:0")
reference = (x.cpu() @ x.cpu()).sum().item()
(x @ x).sum().item()  # warm-up
start = time.perf_counter()
(x @ x).sum().item()
one = time.perf_counter() - start
y = x
for _ in range(int(3.0 / one) + 1):  # about 3 s of work: the interrupt comes 0.3 s into the wait
    y = x @ x
done = torch.openreg.Event()
done.record()
generic = torch.Event(device="openreg:0")
generic.record()
print("waiting", flush=True)
try:
    {wait}
except KeyboardInterrupt:
    print("interrupted, work pending:", not done.query(), flush=True)
else:
    print("the wait ended without an interrupt", flush=True)
# Usable afterwards: the queued work still runs, and a later synchronize waits for all of it.
torch.openreg.synchronize()
print("done afterwards:", done.query(), flush=True)
print("result right:", abs(y.sum().item() - reference) <= 1e-3 * abs(reference) + 1e-2, flush=True)
"""


@pytest.mark.parametrize("wait", list(WAITS.values()), ids=list(WAITS))
def test_sigint_ends_a_host_wait_and_the_process_stays_usable(wait):
    code = textwrap.dedent(CHILD).replace("{wait}", wait)
    # SIGINT's default disposition in the child: a parent started in the background by a shell without job
    # control (a CI runner, `cmd &`) ignores SIGINT, the child would inherit that, and Python installs no
    # handler for an ignored signal (the test then failed in such runs without anything being wrong).
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert child.stdout.readline().strip() == "waiting", child.stderr.read()
        time.sleep(0.3)  # into the wait's sleep
        os.kill(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=TIMEOUT_S)
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert out.splitlines() == [
        "interrupted, work pending: True",
        "done afterwards: True",
        "result right: True",
    ], err
