"""The Dynamo/Inductor device interface for openreg: how the compiler stack asks about openreg devices.

Dynamo and Inductor never call torch.openreg directly; they look the device up with
``torch._dynamo.device_interface.get_interface_for_device("openreg")``. Every answer here forwards to
torch.openreg so the compiler sees exactly the state eager code sees (same current device, same
current stream, same events).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

from torch_openreg import openreg as _openreg


class OpenRegInterface(DeviceInterface):
    device = _openreg.device

    # Dynamo captures streams and events only when they are torch.Stream / torch.Event (or subclasses);
    # torch.openreg.Stream subclasses torch.Stream and torch.openreg.Event returns a torch.Event.
    Event = torch.Event
    Stream = _openreg.Stream

    class Worker:
        """Answers for compile workers (subprocesses) without touching the device runtime there.

        Properties are read in the parent, before workers start, and cached; a worker that starts the
        openreg runtime after a fork would hit the bad-fork check, as CUDA would.
        """

        _properties: dict[int, Any] = {}
        _current: int | None = None  # set_device's index in a compile worker

        @staticmethod
        def set_device(device: int) -> None:
            OpenRegInterface.Worker._current = device

        @staticmethod
        def current_device() -> int:
            current = OpenRegInterface.Worker._current
            return _openreg.current_device() if current is None else current

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            index = _openreg._get_device_index(device, optional=True)
            if index < 0:
                index = OpenRegInterface.Worker.current_device()
            cache = OpenRegInterface.Worker._properties
            if index not in cache:
                cache[index] = _openreg.get_device_properties(index)
            return cache[index]

    current_device = staticmethod(_openreg.current_device)
    set_device = staticmethod(_openreg.set_device)
    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return _openreg._maybe_exchange_device(device)

    @staticmethod
    def exchange_device(device: int) -> int:
        return _openreg._exchange_device(device)

    device_count = staticmethod(_openreg.device_count)
    is_available = staticmethod(_openreg.is_available)
    stream = staticmethod(_openreg.stream)
    current_stream = staticmethod(_openreg.current_stream)
    set_stream = staticmethod(_openreg.set_stream)
    synchronize = staticmethod(_openreg.synchronize)
    memory_allocated = staticmethod(_openreg.memory_allocated)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        _openreg.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        # The stream id is the handle generated code would pass back to the runtime.
        return _openreg.current_stream(device_idx).stream_id

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> Any:
        major, minor = _openreg.get_device_capability(device)
        return major * 10 + minor

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return _openreg.is_bf16_supported(including_emulation)

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        # Device memory is host memory: kernels come from Inductor's C++ (CPU) code generation.
        return False


def register() -> None:
    register_interface_for_device("openreg", OpenRegInterface)
    for index in range(_openreg.device_count()):
        register_interface_for_device(f"openreg:{index}", OpenRegInterface)


def mark_constants() -> None:
    """Run once torch._dynamo has loaded. Dynamo folds torch.cuda.is_available() to a constant (it is in
    its own list of such functions); torch.openreg.is_available() is not in that list, and Dynamo stepped
    into it and broke the graph at the C++ binding behind it. Its answer is fixed for the life of the
    process (the device count is read once, at startup), so it is a constant for compiled code too."""
    torch.compiler.assume_constant_result(_openreg.is_available)
