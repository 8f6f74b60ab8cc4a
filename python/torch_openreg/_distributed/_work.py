"""The Works a collective returns to c10d, read from its queued job (Note [Stream-ordered collectives] in
_comm_queue.py): device-side waits for collectives on openreg tensors, host waits for the others."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ._comm_queue import _Job
from ._device import _om, _side_stream, _stream_args


class _Work(dist.Work):
    """What the Works of a device collective and of a host one share: state read from the queued job."""

    def __init__(self, job: _Job, outputs: list[torch.Tensor]) -> None:
        super().__init__()
        self._job = job
        self._outputs = outputs
        self._future: torch.futures.Future | None = None

    def synchronize(self) -> None:
        self.wait()

    def is_completed(self) -> bool:
        return self._job.done.is_set()

    def is_success(self) -> bool:
        return self._job.done.is_set() and self._job.error is None

    def exception(self):
        return self._job.error

    def _source_rank(self) -> int:
        self._job.done.wait()  # bounded: the job ends by gloo's timeout at the latest
        if self._job.error is not None:
            raise self._job.error
        return self._job.gloo_works[0]._source_rank()


class _DeviceWork(_Work):
    """Work of a collective on openreg tensors: waits are device-side (Note [Stream-ordered collectives])."""

    def wait(self, timeout=None) -> bool:
        if self._job.error is not None:
            raise self._job.error
        end = self._job.end
        assert end is not None  # a device collective always has one
        self._job.resolve_span()  # a recv's virtual span (Note [Collectives on the virtual clock])
        end.block(*_stream_args(_om().current_stream(self._job.device)))
        return True

    def get_future(self):
        if self._future is None:
            fut: torch.futures.Future = torch.futures.Future(devices=[self._job.device])
            side = _side_stream(self._job.device)
            end = self._job.end
            assert end is not None  # a device collective always has one
            self._job.resolve_span()
            end.block(*_stream_args(side))
            with _om().stream(side):
                # The future's events are recorded here, after the wait: its users are stream-ordered
                # after the collective, and a failure reaches them through the wait.
                fut.set_result(self._outputs)
            self._future = fut
        return self._future


class _HostWork(_Work):
    """Work of a collective without openreg tensors (CPU tensors, barrier): wait() blocks the host."""

    def wait(self, timeout=None) -> bool:
        self._job.done.wait()  # bounded: the job ends by gloo's timeout at the latest
        if self._job.error is not None:
            raise self._job.error
        return True

    def get_future(self):
        if self._future is None:
            fut: torch.futures.Future = torch.futures.Future()
            try:
                self.wait()
            except Exception as err:  # noqa: BLE001 - handed to whoever waits on the future
                fut.set_exception(err)
            else:
                fut.set_result(self._outputs)
            self._future = fut
        return self._future


class _BarrierWork(_HostWork):
    """A barrier made as an all_reduce on the device (with a device profile): wait() blocks the host
    until the all_reduce has ended, and moves the host's virtual clock to its end, as NCCL's barrier
    blocks the CPU thread until its all_reduce completes."""

    def __init__(self, device_work: _DeviceWork) -> None:
        super().__init__(device_work._job, [])

    def wait(self, timeout=None) -> bool:
        super().wait(timeout)
        assert self._job.end is not None  # a device collective always has one
        self._job.end.synchronize()  # the host waited for it: its clock moves to the end
        return True
