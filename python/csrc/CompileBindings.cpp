// torch_openreg._C._compiled_kernel_launcher(): the address of the C entry point through which Inductor's
// generated kernel modules enqueue their kernels (backend/engine/CompiledKernels.h), and
// _set_next_compiled_kernel_bytes, the next kernel's bytes for virtual time, and
// _launch_unbuilt_compiled_kernel, timing-only execution's stand-in for a kernel it does not build.

#include "backend/engine/CompiledKernels.h"

#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

#include <cstdint>

void bind_compile(pybind11::module_& m) {
  m.def("_compiled_kernel_launcher",
        [] { return static_cast<std::uint64_t>(at::openreg::compiled_kernel_launcher_address()); });
  // The bytes of this thread's next compiled kernel, for its virtual-time cost (generated wrappers).
  m.def("_set_next_compiled_kernel_bytes", [](double bytes) { at::openreg::set_next_compiled_kernel_bytes(bytes); });
  // Timing-only execution: a compiled kernel Inductor never built, timed under its name (generated wrappers).
  m.def("_launch_unbuilt_compiled_kernel", [](const std::string& name) { at::openreg::launch_unbuilt_compiled_kernel(name); });
}
