"""``torch.openreg.timing``: the modelled GPU's clock (virtual time).

With ``OPENREG_DEVICE_PROFILE`` set (``h100-sxm``, ``a100-sxm``, ``mi300x`` or a profile file's path),
every device is a model of that GPU and every time openreg reports is the time the work would take on
it: each kernel, copy and event gets a virtual start and end from the program's own dependencies
(Note [Virtual time] in sim/src/virtual_clock.cpp), so a step's time is the same on every run, on a
loaded or idle machine. Without a profile, :func:`enabled` is False and the functions below report
nothing virtual.

    with torch.openreg.timing.region() as r:
        loss = model(x).sum(); loss.backward(); opt.step()
    print(r)  # wall time, compute / copy / idle, MFU, and the time by op class
"""

from __future__ import annotations

import numbers
import operator
import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from torch_openreg import _C

from ._device import current_device, device_count, synchronize
from ._device_index import Device, _get_device_index
from ._initialization import _lazy_call, _lazy_init

__all__ = ["Breakdown", "DeviceTime", "Region", "collective", "enabled", "now", "profile", "region"]


# Whether a profile is set; read by compiled graphs before each kernel (Note [Compiled kernels in
# virtual time] in torch_openreg/_inductor/__init__.py). Set when the runtime starts.
_on: bool = False


def _job_rank() -> int | None:
    """This process's rank in its job: torch.distributed's once it is initialized, else the RANK that
    launchers (torchrun, SLURM wrappers) set; None for a process that is not one rank of several."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    value = os.environ.get("RANK", "").strip()
    return int(value) if value.isdecimal() else None


# How deep the calling thread is in torch.optim steps (an optimizer's step may call another's).
_step_depth = threading.local()


def _step_entered(optimizer: Any, args: Any, kwargs: Any) -> None:
    depth = getattr(_step_depth, "n", 0)
    _step_depth.n = depth + 1
    if depth == 0:
        _C._set_in_optimizer_step(True)


def _step_left(optimizer: Any, args: Any, kwargs: Any) -> None:
    depth = max(getattr(_step_depth, "n", 0) - 1, 0)
    _step_depth.n = depth
    if depth == 0:
        _C._set_in_optimizer_step(False)


def _read_profile() -> None:
    global _on
    _on = _C._device_profile() is not None
    if _on:
        # A region's breakdown counts an optimizer step's kernels as the optimizer's (Note [Optimizer
        # steps on the virtual clock] in backend/engine/KernelCost.cpp): torch.optim's global hooks
        # mark the thread around every step. Only with a profile: nothing else reads the mark.
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(_step_entered)
        register_optimizer_step_post_hook(_step_left)
    # Said once per job: every rank of a sizing run would print the same lines (eight ranks, eight
    # copies), and the ranks of a job share one setting of OPENREG_EXECUTE. Python's warnings module
    # already says it only once per process.
    if _C._timing_only() and _job_rank() in (None, 0):
        warnings.warn(
            "OPENREG_EXECUTE=timing: openreg devices only time their kernels and copies on the modelled GPU "
            "and do not run them; the values they would compute read back as zeros. Only small data from "
            "the host (copies and collectives of at most 1 MiB) and what kernels compute from it are real "
            "(times, memory peaks and out-of-memory errors are the model's)",
            stacklevel=2,
        )


_lazy_call(_read_profile)


def _next_kernel(reads: tuple[Any, ...], writes: tuple[Any, ...]) -> None:
    """The bytes of the compiled kernel this thread launches next: its buffers' sizes."""
    total = sum(t.numel() * t.element_size() for t in (*reads, *writes) if isinstance(t, torch.Tensor))
    _C._set_next_compiled_kernel_bytes(float(total))


def profile() -> dict[str, Any] | None:
    """The device profile (``name``, ``display_name``, ``sm_count``, ``l2_bytes``, ``memory_bytes``,
    ``bf16_tensor_flops``, ``memory_bandwidth``, ``ranks_per_node``, ``launch_us``, ``host_op_us``), or
    None when times are this host's."""
    _lazy_init()
    result = _C._device_profile()
    return None if result is None else dict(result)


def enabled() -> bool:
    """Whether a device profile is set: every time openreg reports is virtual."""
    return profile() is not None


def now() -> float:
    """The calling thread's virtual time, in seconds since the runtime started (0.0 without a profile).

    It advances by the profile's launch and host cost for each op the thread issues, and jumps forward
    to the device's time whenever the thread waits for the device (a synchronize, ``.item()``, ...)."""
    _lazy_init()
    return int(_C._virtual_now_ns()) / 1e9


def collective(kind: str, nbytes: int, ranks: int, nodes: int = 1) -> tuple[float, str]:
    """The modelled time of one collective, in seconds, and the algorithm the model picked for it
    (Note [Collective cost model] in sim/src/cost_model.cpp): ``kind`` is ``all_reduce``,
    ``all_gather``, ``reduce_scatter``, ``broadcast``, ``reduce``, ``all_to_all`` or ``send_recv``;
    ``nbytes`` its size as nccl-tests counts it (all_gather: the gathered output; reduce_scatter: the
    input); over ``ranks`` ranks on ``nodes`` nodes. Raises RuntimeError without a device profile.
    TypeError/ValueError for an argument that describes no collective."""
    # Checked here: the binding takes C ints and a double, so 2**32 + 8 ranks arrived as 8 and inf bytes
    # as a time of inf.
    if not isinstance(kind, str):
        raise TypeError(f"torch.openreg.timing.collective: kind must be a str, got {type(kind).__name__}")
    if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Real):
        raise TypeError(f"torch.openreg.timing.collective: nbytes must be a number, got {type(nbytes).__name__}")
    if not 0 <= nbytes < 2**63:  # also refuses nan
        raise ValueError(f"torch.openreg.timing.collective: nbytes must be a finite byte count >= 0, got {nbytes!r}")
    try:  # any integer (a numpy one too), never a float or a bool
        if isinstance(ranks, bool) or isinstance(nodes, bool):
            raise TypeError
        ranks, nodes = operator.index(ranks), operator.index(nodes)
    except TypeError:
        raise TypeError(f"torch.openreg.timing.collective: ranks and nodes must be ints, got "
                        f"{type(ranks).__name__} and {type(nodes).__name__}") from None
    if not 1 <= ranks <= 1 << 20:  # beyond any job's GPUs; the model's step counts stay within a C int
        raise ValueError(f"torch.openreg.timing.collective: ranks must be from 1 to {1 << 20}, got {ranks}")
    if not 1 <= nodes <= ranks:
        raise ValueError(f"torch.openreg.timing.collective: nodes must be from 1 to ranks ({ranks}), got {nodes}")
    _lazy_init()
    result = _C._modelled_collective(kind, float(nbytes), ranks, nodes)
    if result is None:
        raise RuntimeError("torch.openreg.timing.collective needs a device profile: set OPENREG_DEVICE_PROFILE")
    ns, algorithm = result
    return float(ns) / 1e9, str(algorithm)


@dataclass(frozen=True)
class Breakdown:
    """Where one device's time in a region went, in seconds of the modelled GPU, by op class. Each
    instant of the device's timeline counts once, for the first of these that holds (Note [Where time
    goes] in sim/src/virtual_clock.cpp): a kernel ran (the first of matmul, attention, optimizer,
    memory-bound among the kernels running then), a copy ran, a collective ran, nothing ran. So the
    seven sum to the region's wall time (when the region synchronizes, the default)."""

    #: GEMMs and convolutions (costed by their FLOPs on the matrix units).
    matmul: float = 0.0
    #: Scaled dot product attention's kernels (flash, efficient, fused), forward and backward.
    attention: float = 0.0
    #: Every other kernel: elementwise, reductions, norms, copies made as kernels.
    memory_bound: float = 0.0
    #: The optimizer step's kernels: fused optimizers', and the elementwise kernels of any torch.optim
    #: step (foreach, torch.optim's default, or single-tensor), which torch.optim's step hooks mark
    #: (Note [Optimizer steps on the virtual clock] in backend/engine/KernelCost.cpp).
    optimizer: float = 0.0
    #: Copies on the copy engines with no kernel beside them.
    copies: float = 0.0
    #: Collectives with no kernel or copy beside them.
    exposed_comm: float = 0.0
    #: Nothing ran: the device waited for its host (a host-bound, launch-bound step) or another device.
    idle: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """The classes and their seconds, in the order above."""
        return {name: getattr(self, name) for name in _BREAKDOWN_CLASSES}

    @property
    def total(self) -> float:
        """Their sum: the region's wall time."""
        return sum(self.as_dict().values())


# Breakdown's classes, in order, and how Region.__str__ names them.
_BREAKDOWN_CLASSES = {
    "matmul": "matmul",
    "attention": "attention",
    "memory_bound": "memory-bound",
    "optimizer": "optimizer",
    "copies": "copies",
    "exposed_comm": "exposed comm",
    "idle": "idle",
}


@dataclass(frozen=True)
class DeviceTime:
    """One device's share of a region, in seconds of the modelled GPU."""

    device: int
    #: Time during which at least one kernel ran.
    compute: float
    #: Time during which at least one copy ran.
    copy: float
    #: Time during which at least one collective ran (torch.distributed on openreg).
    comm: float
    #: Time during which a collective ran with no kernel or copy beside it: communication that the
    #: program did not hide behind its work.
    exposed_comm: float
    #: Time during which anything ran.
    busy: float
    #: The region's wall time minus ``busy``: the device waited for the host (or for another device).
    idle: float
    #: Kernels issued.
    kernels: int
    #: Model FLOPs utilization: the kernels' FLOPs at the profile's peak for their number formats,
    #: over the region's wall time.
    mfu: float
    #: The region's wall time by op class, each instant once (:class:`Breakdown`).
    breakdown: Breakdown = field(default_factory=Breakdown)


@dataclass
class Region:
    """What :func:`region` measured; filled in when the ``with`` block exits."""

    #: Virtual wall time of the region (the host's clock), in seconds.
    wall: float = 0.0
    devices: list[DeviceTime] = field(default_factory=list)

    @property
    def mfu(self) -> float:
        """MFU over the region's devices (their mean)."""
        return sum(d.mfu for d in self.devices) / len(self.devices) if self.devices else 0.0

    def __str__(self) -> str:
        lines = [f"virtual wall time {self.wall * 1e3:.3f} ms"]
        for d in self.devices:
            lines.append(
                f"  openreg:{d.device}: compute {d.compute * 1e3:.3f} ms, copies {d.copy * 1e3:.3f} ms, "
                f"communication {d.comm * 1e3:.3f} ms ({d.exposed_comm * 1e3:.3f} ms exposed), "
                f"idle {d.idle * 1e3:.3f} ms, {d.kernels} kernels, MFU {d.mfu * 100:.1f}%"
            )
            total = d.breakdown.total
            if total > 0:
                shares = ", ".join(
                    f"{_BREAKDOWN_CLASSES[name]} {seconds / total * 100:.1f}%"
                    for name, seconds in d.breakdown.as_dict().items()
                    if seconds > 0
                )
                lines.append(f"    time by class: {shares}")
        return "\n".join(lines)


class region:  # noqa: N801  (a context manager used like a function, as torch.profiler.record_function)
    """Measures a region in virtual time: its wall time on the host's clock and each device's busy,
    idle and MFU figures. ``device``: one device (index or ``torch.device``), or None for the devices
    the region used: those on which work (a kernel, a copy or a collective) was issued during it, by
    any thread of the process (autograd's included), or the current device if none was. A device the
    process never touched is not reported idle, and does not dilute the region's MFU.
    ``synchronize`` (default True): wait for the devices at the end, so the wall time includes the
    work the region issued. Raises RuntimeError without a device profile."""

    def __init__(self, device: Device = None, synchronize: bool = True) -> None:
        self._device = _get_device_index(device) if device is not None else None
        self._synchronize = synchronize
        self.result = Region()
        self._start_ns = 0
        self._start: dict[int, _C._VirtualDeviceTime] = {}  # stub-only type (_C.pyi): a dict by key
        self._current = 0

    def __enter__(self) -> Region:
        if not enabled():
            raise RuntimeError(
                "torch.openreg.timing.region needs a device profile: set OPENREG_DEVICE_PROFILE "
                "(h100-sxm, a100-sxm, mi300x or a profile file's path) before the first use of openreg"
            )
        # Every device's figures: which ones the region uses is known only at its end.
        candidates = [self._device] if self._device is not None else range(device_count())
        self._start = {d: _C._virtual_device_time(d) for d in candidates}
        self._current = current_device()
        self._start_ns = int(_C._virtual_now_ns())
        return self.result

    def _used(self) -> list[int]:
        if self._device is not None:
            return [self._device]
        # Work is placed on the virtual clock when it is issued (Note [Virtual time] in
        # sim/src/virtual_clock.cpp), so the count of work items placed tells, before any synchronize,
        # every device that work was issued to since __enter__, whichever thread issued it.
        used = [d for d, start in self._start.items() if _C._virtual_device_time(d)["work_items"] > start["work_items"]]
        return used or [self._current]

    def __exit__(self, *exc: object) -> None:
        devices = self._used()
        if self._synchronize and exc[0] is None:
            for d in devices:
                synchronize(d)
        wall_ns = int(_C._virtual_now_ns()) - self._start_ns
        self.result.wall = wall_ns / 1e9
        for d in devices:
            end = _C._virtual_device_time(d)
            start = self._start[d]

            def delta(key: str, end: Mapping[str, Any] = end, start: Mapping[str, Any] = start) -> float:
                return float(end[key] - start[key])

            busy = delta("busy_ns")
            idle = max(0.0, wall_ns - busy) / 1e9
            self.result.devices.append(
                DeviceTime(
                    device=d,
                    compute=delta("compute_busy_ns") / 1e9,
                    copy=delta("copy_busy_ns") / 1e9,
                    comm=delta("comm_busy_ns") / 1e9,
                    exposed_comm=delta("exposed_comm_ns") / 1e9,
                    busy=busy / 1e9,
                    idle=idle,
                    kernels=int(delta("kernels")),
                    mfu=delta("peak_ns") / wall_ns if wall_ns > 0 else 0.0,
                    breakdown=Breakdown(
                        matmul=delta("matmul_ns") / 1e9,
                        attention=delta("attention_ns") / 1e9,
                        memory_bound=delta("memory_bound_ns") / 1e9,
                        optimizer=delta("optimizer_ns") / 1e9,
                        copies=delta("copy_alone_ns") / 1e9,
                        exposed_comm=delta("exposed_comm_ns") / 1e9,
                        idle=idle,
                    ),
                )
            )
