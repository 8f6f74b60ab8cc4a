// torch_openreg._C._compiled_kernel_launcher(): the address of the C entry point through which Inductor's
// generated kernel modules enqueue their kernels (backend/ops/engine/CompiledKernels.h).

#include "backend/ops/engine/CompiledKernels.h"

#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

#include <cstdint>

void bind_compile(pybind11::module_& m) {
  m.def("_compiled_kernel_launcher",
        [] { return static_cast<std::uint64_t>(at::openreg::compiled_kernel_launcher_address()); });
}
