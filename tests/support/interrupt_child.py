"""A child program that queues about 3 s of matmuls on openreg:0 and then waits for them on the host in a
given way, and the steps that interrupt it: what tests/python/test_interrupt.py checks and
bench/benchmarks/interrupt_bench.py times (Note [Interruptible host waits] in sim/src/host_wait.cpp).

The child prints "waiting" once it waits. After SIGINT it prints whether the wait ended with the work
still pending, then, after a full synchronize, whether the work ran and its result is right.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

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
"""

# A child whose host waits for room in a full launch queue (OPENREG_LAUNCH_QUEUE_DEPTH=4): the queue
# holds 4 matmuls of about 0.6 s each, and the launch in `{wait}` waits for 2 of them to complete, so the
# interrupt (0.3 s into the wait) comes with about 1 s to spare, 0.9 s if the calibration ran twice as
# slow as the work (a machine loaded while it measures).
LAUNCH_QUEUE_CHILD = """
import time, torch

x = torch.randn(512, 512, device="openreg:0")
(x @ x).sum().item()  # warm-up
one = float("inf")
for _ in range(3):  # the fastest of three: a machine busy for a moment makes the work longer, not shorter
    start = time.perf_counter()
    (x @ x).sum().item()
    one = min(one, time.perf_counter() - start)
n = max(512, int(512 * (0.6 / one) ** (1 / 3)) // 64 * 64)  # a matmul of about 0.6 s
a = torch.randn(n, n, device="openreg:0") / n ** 0.5
reference = (a.cpu() @ a.cpu()).sum().item()

def work():
    global y
    for _ in range(6):
        y = a @ a

g = torch.openreg.OpenRegGraph()
with torch.openreg.graph(g):
    work()
torch.openreg.synchronize()
for _ in range(4):  # fills the launch queue
    y = a @ a
done = torch.openreg.Event()
done.record()
"""

# What both children do once their work is queued: wait in `{wait}`, report the interrupt, then show
# the process usable: the queued work still runs, a later synchronize waits for all of it, and `{again}`
# (the interrupted launches issued anew, for the launch-queue child) gives the right result.
INTERRUPTED = """
print("waiting", flush=True)
try:
    {wait}
except KeyboardInterrupt:
    print("interrupted, work pending:", not done.query(), flush=True)
else:
    print("the wait ended without an interrupt", flush=True)
torch.openreg.synchronize()
print("done afterwards:", done.query(), flush=True)
{again}
torch.openreg.synchronize()
print("result right:", abs(y.sum().item() - reference) <= 1e-3 * abs(reference) + 1e-2, flush=True)
"""

#: How long after "waiting" the signal comes: well inside the wait's sleep.
INTO_THE_WAIT_S = 0.3


def start(wait: str, launch_queue: bool = False) -> subprocess.Popen:
    """Starts the child with `wait` (a Python statement; `done`, `generic`, `y` are in scope); with
    `launch_queue`, the child whose `wait` (`work()` or `g.replay()`) waits for room in a full launch
    queue."""
    setup = LAUNCH_QUEUE_CHILD if launch_queue else CHILD
    code = (setup + INTERRUPTED).replace("{again}", wait if launch_queue else "").replace("{wait}", wait)
    env = dict(os.environ, OPENREG_LAUNCH_QUEUE_DEPTH="4") if launch_queue else None
    # SIGINT's default disposition in the child: a parent started in the background by a shell without job
    # control (a CI runner, `cmd &`) ignores SIGINT, the child would inherit that, and Python installs no
    # handler for an ignored signal.
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def interrupt(child: subprocess.Popen) -> float:
    """Once the child printed "waiting": sends SIGINT INTO_THE_WAIT_S later; returns when it was sent."""
    time.sleep(INTO_THE_WAIT_S)
    sent = time.perf_counter()
    os.kill(child.pid, signal.SIGINT)
    return sent
