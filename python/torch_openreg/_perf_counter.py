"""``OPENREG_PERF_COUNTER=virtual``: a program that times itself with ``time.perf_counter`` reads the
modelled GPU's time (issue 40).

Note [A program's own timer under a profile]
Training programs time their steps on the host's clock: torchtitan's tokens/s, TFLOPs and MFU lines
(``time.perf_counter()`` around its log interval), Lightning's ``Throughput``, most hand-written loops.
Under a device profile the device's work takes virtual time, so on this machine those lines measure
this CPU, not the modelled GPU (a timing-only torchtitan debug-model run logged 20k-134k tokens/s
between identical steps). With ``OPENREG_PERF_COUNTER=virtual`` (and a profile), importing torch_openreg
replaces ``time.perf_counter`` and ``time.perf_counter_ns`` with the calling thread's virtual clock
(``torch.openreg.timing.now()``), so the same lines report the modelled GPU's figures, unchanged.

What it changes for the rest of the process:
- Every caller of ``time.perf_counter``/``perf_counter_ns`` through the ``time`` module reads virtual time:
  seconds since the runtime started, on the calling thread's clock. It advances by the modelled host
  cost of each op the thread issues and jumps to the device's time when the thread waits for the device
  (a synchronize, ``.item()``, an event's wait). Python work between ops takes no virtual time (data
  loading, tokenizing, logging), as it would overlap a GPU's work. Each thread has its own clock.
- Names bound before torch_openreg was imported (``from time import perf_counter`` in a module that torch
  imports, e.g. ``torch.autograd.profiler``) keep the host's clock; names bound after read virtual time.
- ``time.time``, ``time.monotonic``, ``time.sleep``, ``time.process_time`` and every timeout stay the
  host's: they run the program (gloo's and the store's timeouts, log timestamps, sleeps).
- A forked child without the runtime (a ``DataLoader`` worker) reads the host's clock: it cannot start
  openreg after a fork (as CUDA cannot), and it issues no device work to time.
- ``torch.compile``'s own compile-time metrics read virtual time (compilation issues no device work, so
  about zero), and so does an Inductor autotuning benchmark that times on the host's clock: the choice
  among candidates would be by virtual time. Leave the variable unset when compile-time figures or
  max-autotune matter.
"""

from __future__ import annotations

import os
import time

ENV = "OPENREG_PERF_COUNTER"
_host_perf_counter = time.perf_counter
_host_perf_counter_ns = time.perf_counter_ns


def _virtual_ns() -> int:
    from torch_openreg import _C

    if _C._is_in_bad_fork():  # a forked child: no runtime to ask (Note [A program's own timer ...])
        return _host_perf_counter_ns()
    return _C._virtual_now_ns()


def _perf_counter() -> float:
    """time.perf_counter under OPENREG_PERF_COUNTER=virtual: the calling thread's virtual time, seconds."""
    return _virtual_ns() / 1e9


def _perf_counter_ns() -> int:
    """time.perf_counter_ns under OPENREG_PERF_COUNTER=virtual: the calling thread's virtual time, ns."""
    return _virtual_ns()


def install_from_env() -> None:
    """Reads OPENREG_PERF_COUNTER when torch_openreg is imported: "virtual" puts the time module's
    perf_counter on the virtual clock; "host" or unset leaves it alone."""
    value = os.environ.get(ENV, "").strip()
    if value in ("", "host"):
        return
    if value != "virtual":
        raise RuntimeError(f"{ENV}='{value}' is invalid: expected 'virtual' (time.perf_counter reads the "
                           f"modelled GPU's time under a device profile) or 'host'")
    if not os.environ.get("OPENREG_DEVICE_PROFILE", "").strip():
        raise RuntimeError(f"{ENV}=virtual needs OPENREG_DEVICE_PROFILE: without a device profile every time "
                           f"openreg reports is this host's, so there is no virtual clock to read")
    time.perf_counter = _perf_counter
    time.perf_counter_ns = _perf_counter_ns


def installed() -> bool:
    """Whether time.perf_counter reads virtual time (OPENREG_PERF_COUNTER=virtual)."""
    return time.perf_counter is _perf_counter
