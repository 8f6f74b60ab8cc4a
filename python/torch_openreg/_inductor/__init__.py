"""Inductor code generation for openreg: C++ (CPU) kernels, since openreg device memory is host memory.

Note [Compiled kernels are stream work items]
Inductor's C++ backend compiles each fused kernel into a small Python extension whose entry parses
its arguments (tensor data pointers, sizes, scalars) and calls the kernel. For openreg kernels the
entry instead packs the parsed arguments and hands them to openreg_launch_compiled_kernel
(backend/engine/CompiledKernels.cpp), which enqueues the kernel on the current stream of the current
openreg device through the backend's launch helper: a compiled call returns once its kernels are
queued, runs in stream order with eager work (inside ``with torch.openreg.stream(s)`` on ``s``), takes
its share of the device's compute threads, and a failing kernel is reported at the next
synchronization with its name, like an eager kernel. Device threads never take the GIL: the queued
closure holds only raw pointers and numbers.

Raw pointers are enough for the same reason they are for eager work items (Note [Work items hold CPU
aliases, not tensors] in backend/engine/AsyncPath.cpp): the allocator is stream-ordered, so a
buffer the wrapper frees after enqueueing a kernel is reused only by later work on the same stream,
as on CUDA; a tensor used on another stream needs record_stream, as on CUDA.

Ops that Inductor leaves to fallbacks (extern kernels such as mm, and aten fallbacks) take the normal
openreg path and are asynchronous and stream-ordered already. CPU kernels in a graph that also has
openreg kernels run on the calling thread, as Inductor runs them on the CPU.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch._inductor.async_compile import AsyncCompile, get_compile_threads
from torch._inductor.codecache import CppPythonBindingsCodeCache, LambdaFuture
from torch._inductor.codegen.common import (
    DeviceOpOverrides,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files
from torch._inductor.virtualized import V

# Where the generated kernel modules find openreg_launch_compiled_kernel (they are built without
# libtorch, so they cannot link against the backend): its address, in decimal.
_LAUNCHER_VAR = "_OPENREG_COMPILED_KERNEL_LAUNCHER"


class OpenRegCppBindings(CppPythonBindingsCodeCache):
    """Inductor's C++ kernel bindings, with an entry that enqueues the kernel on the current openreg
    stream instead of running it (Note [Compiled kernels are stream work items])."""

    cache: dict[str, Any] = {}  # not shared with CPU kernels' bindings (different entry code)
    # The parsed arguments, in the kernel's own struct (openreg_compiled::Args, written per kernel by
    # _kernel_args_struct), go to the launcher; OPENREG_KERNEL_NAME is defined per kernel too.
    call_entry_function = ("openreg_compiled::enqueue(OPENREG_KERNEL_NAME, new openreg_compiled::Args{{{}}}); "
                           "Py_RETURN_NONE;")
    # Formatted by Inductor with str.format: braces are doubled.
    extra_parse_arg = """
        #include <memory>
        #include <stdexcept>
        namespace openreg_compiled {{
        using Launcher = void (*)(void (*)(void*), void*, void (*)(void*), const char*);
        static Launcher launcher() {{
            static const Launcher fn = [] {{
                const char* addr = std::getenv("_OPENREG_COMPILED_KERNEL_LAUNCHER");
                if (addr == nullptr) throw std::runtime_error("_OPENREG_COMPILED_KERNEL_LAUNCHER is not set");
                return reinterpret_cast<Launcher>(std::strtoull(addr, nullptr, 10));
            }}();
            return fn;
        }}
        static void enqueue(const char* name, Args* parsed) {{
            std::unique_ptr<Args> owned(parsed);
            Launcher launch = launcher();
            // Owned by the launcher from here: freed after the kernel ran, or if it never runs.
            launch(&run, owned.release(), [](void* p) {{ delete static_cast<Args*>(p); }}, name);
        }}
        }}  // namespace openreg_compiled
    """


# Note [A compiled kernel's arguments are a struct]
# A queued kernel keeps its parsed arguments until a device thread runs it. They live in a struct
# written for the kernel from its argument types (one field per argument, the types Inductor's
# parse_arg gives them) with a function that calls the kernel with its fields. A generic container
# would be shorter to write but not to compile: a std::tuple of the arguments, unpacked by std::apply,
# made GCC take minutes over a compiled AdamW step, whose one kernel takes 224 pointers (every
# parameter, gradient and moment); the struct compiles in the time of the kernel alone.
def _kernel_args_struct(argtypes: list[str]) -> str:
    """The C++ of openreg_compiled::Args and openreg_compiled::run for a kernel taking `argtypes`."""
    fields = "".join(f"    {t.replace('const ', '')} a{i};\n" for i, t in enumerate(argtypes))
    call = ", ".join(f"s.a{i}" for i in range(len(argtypes)))
    return (
        "namespace openreg_compiled {\n"
        f"struct Args {{\n{fields}}};\n"
        f"static void run(void* p) {{\n    const Args& s = *static_cast<const Args*>(p);\n    kernel({call});\n}}\n"
        "}  // namespace openreg_compiled\n"
    )


# Note [Compiled kernels build in Inductor's workers]
# Inductor compiles the C++ kernels of a graph in its pool of compile workers (config.compile_threads,
# from the machine's cores) while the generated wrapper module loads: each kernel's definition is a
# future, compiled in a worker, and `async_compile.wait(globals())` at the end of the module loads the
# built libraries. An openreg kernel differs from a CPU kernel only in its entry's text, so it takes the
# same path: the worker runs the compiler on the source (a function of the text and flags alone), and
# the main process loads the library and binds the entry. With one compile thread (the user's choice,
# or a one-core machine) both compile on the calling thread.


# Note [Compiled kernels in timing-only execution]
# Timing-only execution (OPENREG_EXECUTE=timing) times kernels and runs only those that compute from
# values the program gave (Note [Values in timing-only execution] in sim/src/stream.cpp). Building a
# compiled kernel is most of what compiling costs (a C++ compile per fused kernel), and in this mode
# almost none of them runs, so openreg's kernels are built only when one is about to run: its entry is a
# stand-in that, at each call,
#  - when the kernel touches at most sim::kTimingOnlyRunKernelBytes (the size a kernel that does not say
#    what it reads may run at) and everything it reads holds values, builds the kernel (once) and calls
#    it: it runs, as on a GPU, and what it writes then holds values;
#  - otherwise enqueues a kernel of the same name that runs nothing, with the cost the wrapper handed
#    over from its buffers (Note [Compiled kernels in virtual time]): the timeline is the one the built
#    kernel gives. What it writes (its `T*` arguments, in-place ones included) holds no values and reads
#    back as zeros, never as the stale bytes of a reused block (a compiled loss read 0.00085).
# Which buffers it reads and writes comes from the kernel's argument types, as for the race checker.
# Inductor's own work (tracing, fusion, the wrapper) is unchanged, and the choice is made when a kernel
# is called, so a cached graph serves both modes.
class _KernelBuiltOnDemand:
    """A compiled kernel's entry in timing-only execution (Note [Compiled kernels in timing-only
    execution])."""

    def __init__(self, name: str, argtypes: list[str], source: str) -> None:
        from torch_openreg import _C

        self._name, self._argtypes, self._source = name, argtypes, source
        kinds = [str(t).strip() for t in argtypes]
        pointers = [i for i, k in enumerate(kinds) if k.endswith("*")]
        self._reads = [i for i in pointers if kinds[i].startswith("const ")]
        self._writes = [i for i in pointers if not kinds[i].startswith("const ")]
        self._run_bytes = _C._timing_only_run_kernel_bytes()
        self._built: Any = None

    def __call__(self, *args: Any) -> None:
        from torch_openreg import _C

        def tensors(indices: list[int]) -> list[torch.Tensor]:
            return [args[i] for i in indices if i < len(args) and isinstance(args[i], torch.Tensor)]

        reads, writes = tensors(self._reads), tensors(self._writes)
        # The bytes the wrapper gave the launch as the kernel's cost (timing._next_kernel): the sim runs
        # a kernel that does not say what it reads by them.
        nbytes = sum(t.numel() * t.element_size() for t in (*reads, *writes))
        on_device = [t for t in writes if t.device.type == "openreg"]
        if 0 < nbytes <= self._run_bytes and _C._holds_values([t for t in reads if t.device.type == "openreg"]):
            if self._built is None:
                self._built = OpenRegCppBindings.load_pybinding(self._argtypes, self._source)
            self._built(*args)
            _C._set_holds_values(on_device, True)  # in issue order, after the kernel that computes them
            return
        _C._set_holds_values(on_device, False)
        _C._launch_unbuilt_compiled_kernel(self._name)


def openreg_cpp_pybinding(kernel_name: str, argtypes: list[str], source_code: str) -> Any:
    """What the generated wrapper calls, for openreg kernels, instead of async_compile.cpp_pybinding.

    As for CPU kernels, the kernel is compiled in Inductor's compile workers when it has more than one
    (Note [Compiled kernels build in Inductor's workers]): the wrapper module gets a future, which the
    ``async_compile.wait(globals())`` at its end replaces with the loaded entry. In timing-only execution
    a kernel is built only when it is about to run (Note [Compiled kernels in timing-only execution]).
    """
    if not kernel_name.isidentifier():
        raise ValueError(f"unexpected Inductor kernel name {kernel_name!r}")
    from torch_openreg import _C

    source = f'#define OPENREG_KERNEL_NAME "{kernel_name}"\n{source_code}\n{_kernel_args_struct(argtypes)}'
    if _C._timing_only():
        return _KernelBuiltOnDemand(kernel_name, argtypes, source)
    if get_compile_threads() <= 1:
        return OpenRegCppBindings.load_pybinding(argtypes, source)
    return LambdaFuture(OpenRegCppBindings.load_pybinding_async(argtypes, source, submit_fn=AsyncCompile.submit))


class OpenRegCppScheduling(CppScheduling):
    """CppScheduling for openreg nodes: marks the kernels it defines as openreg kernels for the wrapper."""

    def define_kernel(self, src_code: Any, nodes: Any, kernel_args: Any = None) -> Any:
        wrapper: Any = V.graph.wrapper_code
        previous = getattr(wrapper, "_openreg_kernel", False)
        wrapper._openreg_kernel = True  # read by OpenRegPythonWrapperCodegen.define_kernel
        try:
            return super().define_kernel(src_code, nodes, kernel_args)
        finally:
            wrapper._openreg_kernel = previous


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


def _is_cpu_buffer(arg: Any) -> bool:
    """Whether a kernel call argument names a CPU tensor of the graph being compiled."""
    if not isinstance(arg, str):
        return False
    buffer = V.graph.try_get_buffer(arg)
    if buffer is None or not hasattr(buffer, "get_device"):
        return False
    device = buffer.get_device()
    return device is not None and device.type == "cpu"


# Note [Compiled kernels that touch CPU tensors]
# An openreg kernel may take CPU tensors as arguments: Adam's and AdamW's step counters are 0-d CPU
# tensors, which a CPU kernel of the same graph increments in place on the calling thread. The CPU
# allocator and CPU kernels are not stream-ordered, so a queued openreg kernel holding a raw pointer
# into CPU memory would race with the next CPU kernel (or with the CPU buffer's reuse after the wrapper
# frees it): the host waits for the current stream right after enqueueing such a kernel. CUDA does
# not need this because Inductor passes a 0-d CPU tensor to a GPU kernel by value at launch; openreg's
# C++ kernels take it by pointer. Kernels over device tensors only stay asynchronous.


# Note [Compiled kernels in the race checker]
# The stream race checker (torch.openreg.sanitizer) sees eager ops in the op engine, but a compiled
# kernel reaches the device through openreg_launch_compiled_kernel with raw pointers only. Inductor knows
# each kernel's buffers and how it uses them: its C++ signature takes inputs as `const T*` and outputs
# and in-place (mutated) buffers as `T*`. The wrapper reports them, named by the kernel, right before the
# kernel's call: one line guarded by the checker's flag, so a graph costs one attribute load per kernel
# when the checker is off, and the generated code is the same whether it is on or not (Inductor's
# caches need not know). The buffers are read and written on the current stream of the current device,
# where the kernel is enqueued; a race raises before the kernel is queued, as an eager op's does.


# Note [Compiled kernels in virtual time]
# With a device profile (torch.openreg.timing) a kernel's virtual duration comes from its cost; an
# eager op's is computed from its arguments in the op engine, but a compiled kernel arrives as raw
# pointers. Its buffers are what Inductor's C++ kernels are bound by (matmuls and convolutions stay
# extern aten calls, costed as eager ops), so the wrapper hands their bytes to the launch, in the line
# after the race checker's: guarded by one flag, set when the runtime starts with a profile, so
# without one a kernel costs one attribute load. A mutated buffer (read and written) counts once.


def _kernel_buffers(call_args: Any, arg_types: Any) -> tuple[list[str], list[str]]:
    """The buffer arguments of a C++ kernel call: (read, written), from the kernel's argument types."""
    reads: list[str] = []
    writes: list[str] = []
    if not arg_types or len(arg_types) != len(call_args):
        return reads, writes
    for arg, kind in zip(call_args, arg_types):
        kind = str(kind).strip()
        if not isinstance(arg, str) or not arg.isidentifier() or not kind.endswith("*"):
            continue  # sizes and scalars
        (reads if kind.startswith("const ") else writes).append(arg)
    return reads, writes


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
        # Note [Compiled kernels in the race checker]
        reads, writes = _kernel_buffers(call_args, kwargs.get("arg_types"))
        if reads or writes:
            buffers = f"({''.join(r + ', ' for r in reads)}), ({''.join(w + ', ' for w in writes)})"
            self.writeline(f"if _openreg_sanitizer.on: _openreg_sanitizer._launch({kernel_name!r}, {buffers})")
            # Note [Compiled kernels in virtual time]
            self.writeline(f"if _openreg_timing._on: _openreg_timing._next_kernel({buffers})")
        # The kernel's entry enqueues it on the current stream (Note [Compiled kernels are stream
        # work items]): a plain call, as for CPU kernels.
        self.writeline(self.wrap_kernel_call(kernel_name, call_args))
        if any(_is_cpu_buffer(arg) for arg in call_args):
            # Note [Compiled kernels that touch CPU tensors]
            self.writeline("torch.openreg.current_stream().synchronize()")
        return None

    def write_header(self) -> None:
        from torch._inductor import config

        if config.triton.cudagraphs:
            # Inductor would silently run such a graph without replay on a non-CUDA device; say so.
            raise RuntimeError(
                "torch.compile(mode='reduce-overhead') needs Inductor's CUDA graph trees, which in this torch "
                "build torch.cuda.CUDAGraph directly (not torch.accelerator.Graph) and so run only on CUDA: use "
                "mode='default' or 'max-autotune-no-cudagraphs', and capture the compiled function with "
                "torch.openreg.graph yourself")
        super().write_header()
        self.imports.writeline("from torch_openreg._inductor import openreg_cpp_pybinding")
        self.imports.writeline("from torch_openreg.openreg import sanitizer as _openreg_sanitizer")
        self.imports.writeline("from torch_openreg.openreg import timing as _openreg_timing")

    def define_kernel(self, kernel_name: str, kernel_body: str, metadata: str | None = None, gpu: bool = True,
                      cpp_definition: str | None = None) -> None:
        prefix = "async_compile.cpp_pybinding("
        if getattr(self, "_openreg_kernel", False) and kernel_body.startswith(prefix):
            kernel_body = f"openreg_cpp_pybinding({kernel_name!r}, " + kernel_body[len(prefix):]
        super().define_kernel(kernel_name, kernel_body, metadata=metadata, gpu=gpu, cpp_definition=cpp_definition)


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


def _openreg_codegen_backend_is_cpp() -> None:
    """Makes Inductor's ``get_current_backend()`` answer ``config.cpu_backend`` ("cpp") for openreg.

    It answers ``config.cuda_backend`` ("triton") for every device it does not know, and the CSE
    handler uses the answer to decide how to propagate dtypes through generated code: for openreg
    kernels, which are C++ kernels, the Triton rules left some C++ values without a dtype and Inductor
    failed on graphs with random ops (dropout). The function is imported by name, so the modules that
    ask it on openreg's behalf are rebound too.
    """
    from torch._inductor import config, utils
    from torch._inductor.codegen import common

    if getattr(utils.get_current_backend, "_openreg", False):
        return
    original = utils.get_current_backend

    def get_current_backend(device_type: str | None = None) -> str:
        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        if device_type == "openreg":
            return config.cpu_backend
        return original(device_type)

    get_current_backend._openreg = True  # type: ignore[attr-defined]
    utils.get_current_backend = get_current_backend
    common.get_current_backend = get_current_backend


class _CodegenVersion(CustomGraphModulePass):
    """Keys Inductor's caches on this file: a graph compiled by an older openreg codegen (a wrapper
    without its stream rules) must not be loaded from the FX graph cache. Inductor hashes the uuid of
    every device's custom pass into the cache key; the pass itself changes nothing."""

    def __call__(self, gm: Any) -> None:
        return None

    def uuid(self) -> bytes:
        return get_hash_for_files((__file__,))


# Note [Inductor's runtime estimates]
# Inductor's scheduler passes that reorder compute around communication (and their logging) ask
# `config.estimate_op_runtime` what each node costs; by default it answers 0 for devices that are not
# GPUs, so nothing is planned on openreg. With a device profile the estimate is the timing model's
# (Note [Cost model] in sim/src/cost_model.cpp) for the node's FLOPs (what Inductor's flop counter
# knows: matmuls and convolutions) and the bytes of the buffers it reads and writes, in ms as Inductor
# expects. Without a profile, for other devices and for collectives (not on the virtual clock yet) it
# answers what Inductor's default does. Installed when Inductor loads, unless the user set their own.
def _estimate_op_runtime(snode: Any) -> float:
    import torch
    from torch._inductor.utils import is_collective

    from torch_openreg import _C

    node = getattr(snode, "node", None)
    buffer: Any = snode.get_nodes()[0].get_outputs()[0].node if snode.get_nodes() else None
    device = buffer.get_device() if buffer is not None and hasattr(buffer, "get_device") else None
    if buffer is None or device is None or device.type != "openreg" or node is None or is_collective(node):
        return float(snode.get_estimated_runtime())
    flops = float(snode.estimate_flops() or 0)
    nbytes = float(snode.get_read_write_buffers_sizes())
    dtype = buffer.maybe_get_dtype() if hasattr(buffer, "maybe_get_dtype") else None

    ns = _C._modelled_kernel_ns(flops, nbytes, dtype or torch.float32, flops > 0)
    if ns is None:
        return float(snode.get_estimated_runtime())
    return float(ns) / 1e6


def register() -> None:
    from torch._inductor import config

    from torch_openreg import _C

    if config.estimate_op_runtime == "default":  # Note [Inductor's runtime estimates]
        config.estimate_op_runtime = _estimate_op_runtime  # type: ignore[assignment]  # a str or a callable
    os.environ[_LAUNCHER_VAR] = str(_C._compiled_kernel_launcher())
    _treat_openreg_nodes_as_cpu()
    _openreg_codegen_backend_is_cpp()
    register_device_op_overrides("openreg", OpenRegDeviceOpOverrides())
    register_backend_for_device("openreg", OpenRegCppScheduling, OpenRegPythonWrapperCodegen, CppWrapperCpu,
                                device_custom_pass=_CodegenVersion())
