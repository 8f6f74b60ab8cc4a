"""Ctrl-C during a host wait raises KeyboardInterrupt at once, and the process stays usable.

A host thread waiting for openreg work (synchronize of a device, stream or event, .item(), a copy to
the host) runs Python's signal handlers while it sleeps (Note [Interruptible host waits] in
sim/src/host_wait.cpp). The queued work is not cancelled: a later synchronize waits for it and its
results are right. Each case queues seconds of matmuls, sends SIGINT once the child is waiting, and
checks that the wait ended while that work was still pending.
"""

import pytest
from support import interrupt_child

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


@pytest.mark.parametrize("wait", list(WAITS.values()), ids=list(WAITS))
def test_sigint_ends_a_host_wait_and_the_process_stays_usable(wait):
    _interrupt_and_check(interrupt_child.start(wait))


def _interrupt_and_check(child):
    """Interrupts `child` once it waits: the wait ended with the work pending, and afterwards the work
    ran and the result is right."""
    try:
        assert child.stdout.readline().strip() == "waiting", child.stderr.read()
        interrupt_child.interrupt(child)
        out, err = child.communicate(timeout=TIMEOUT_S)
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert out.splitlines() == [
        "interrupted, work pending: True",
        "done afterwards: True",
        "result right: True",
    ], err


@pytest.mark.parametrize("wait", ["work()", "g.replay()"], ids=["eager_ops", "graph_replay"])
def test_sigint_ends_a_wait_for_room_in_a_full_launch_queue(wait):
    """The launch that waits raises KeyboardInterrupt and does not run; the launches before it do, and
    the same ops (or the same graph) run again afterwards with the right result (Note [Bounded launch
    queue] in sim/src/stream.cpp)."""
    _interrupt_and_check(interrupt_child.start(wait, launch_queue=True))
