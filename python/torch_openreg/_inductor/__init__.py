"""Inductor code generation for openreg: C++ (CPU) kernels, since openreg device memory is host memory.

Today each compiled kernel runs on the calling thread after the current openreg stream has drained
(the wrapper synchronizes that stream first): results and ordering equal eager, but a compiled kernel
is host-synchronous, unlike eager openreg work, which is queued on the stream. Launching kernels as
stream work items (asynchronous, as CUDA does) is not done yet.
"""

from __future__ import annotations

from typing import Any

from torch._inductor.codegen.common import (
    DeviceOpOverrides,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V


class OpenRegDeviceOpOverrides(DeviceOpOverrides):
    """Python source snippets the wrapper emits to select devices and streams."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"def {name}(index): return torch.openreg.current_stream(index).stream_id"

    def set_device(self, device_idx: int) -> str:
        return f"torch.openreg.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.openreg.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.openreg.device({device_idx})"


class OpenRegPythonWrapperCodegen(PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph: bool, subgraph_name: Any, parent_wrapper: Any, partition_signatures: Any = None) -> Any:
        if is_subgraph:
            return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return OpenRegPythonWrapperCodegen()

    def _generate_kernel_call_helper(self, kernel_name: str, call_args: Any, *, device: Any = None,
                                     triton: bool = True, **kwargs: Any) -> None:
        device = device or V.graph.get_current_device_or_throw()
        if triton or device.type != "openreg":
            return super()._generate_kernel_call_helper(kernel_name, call_args, device=device,
                                                        triton=triton, **kwargs)
        # The C++ kernel reads and writes device memory from this thread: queued work on the current
        # stream (which produced its inputs, or still uses its outputs' memory) must finish first.
        self.writeline("torch.openreg.current_stream().synchronize()")
        self.writeline(self.wrap_kernel_call(kernel_name, call_args))
        return None


def _treat_openreg_nodes_as_cpu() -> None:
    """Makes Inductor's scheduler take its CPU paths for openreg nodes.

    The scheduler gates CPU-only decisions (no loop reindexing for fusion, C++ reduction shapes) on
    ``node.is_cpu()``; openreg kernels are C++ CPU kernels over host memory, so those paths are the
    right ones. Without this the scheduler applies GPU (SIMD) fusion rules to C++ kernels and fails.
    """
    from torch._inductor import scheduler

    base = scheduler.BaseSchedulerNode
    if getattr(base.is_cpu, "_openreg", False):
        return
    original = base.is_cpu

    def is_cpu(self: Any) -> bool:
        device = self.get_device()
        return original(self) or (device is not None and device.type == "openreg")

    is_cpu._openreg = True  # type: ignore[attr-defined]
    base.is_cpu = is_cpu  # type: ignore[method-assign]


def register() -> None:
    _treat_openreg_nodes_as_cpu()
    register_device_op_overrides("openreg", OpenRegDeviceOpOverrides())
    register_backend_for_device("openreg", CppScheduling, OpenRegPythonWrapperCodegen, CppWrapperCpu)
