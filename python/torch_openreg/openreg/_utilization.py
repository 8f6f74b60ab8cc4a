"""``torch.openreg.utilization``: how busy a device has been, as ``nvidia-smi`` reports a GPU's.

nvidia-smi samples the share of a recent period during which at least one kernel ran. openreg samples
the device's busy time (nanoseconds during which at least one work item ran, counted by the
simulator): each call reports the share of the time since the previous call on that device (the first
call: since the runtime started).
"""

from __future__ import annotations

import threading
import time

from torch_openreg import _C

from ._device_index import Device, _get_device_index
from ._initialization import _lazy_call, _lazy_init

# Per device index: (monotonic ns, busy ns) of the previous sample. Guarded by `_lock`: two threads
# sampling the same device must each see a consistent pair.
_lock = threading.Lock()
_previous: dict[int, tuple[int, int]] = {}
_runtime_start_ns: list[int] = []  # set once when the runtime starts (a list: written from a callback)


def _record_start() -> None:
    _runtime_start_ns.append(time.monotonic_ns())


_lazy_call(_record_start)


def utilization(device: Device = None) -> int:
    """Percent (0-100) of the time since the previous call for ``device`` (default: the current
    device; the first call: since the runtime started) during which the device ran work."""
    _lazy_init()
    idx = _get_device_index(device, optional=True)
    if _C._device_profile() is not None:
        # Virtual time (torch.openreg.timing): the modelled GPU's busy time over the host's virtual clock.
        busy = int(_C._virtual_device_time(idx)["busy_ns"])
        now = int(_C._virtual_now_ns())
        start = 0
    else:
        busy = int(_C._device_busy_time_ns(idx))
        now = time.monotonic_ns()
        start = _runtime_start_ns[0]
    with _lock:
        then, busy_then = _previous.get(idx, (start, 0))
        _previous[idx] = (now, busy)
    period = now - then
    if period <= 0:
        return 0
    return max(0, min(100, round(100 * (busy - busy_then) / period)))
