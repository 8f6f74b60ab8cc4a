#pragma once
// Compiled kernels on openreg streams (Note [Compiled kernels are stream work items] in
// python/torch_openreg/_inductor/__init__.py): the C entry point that Inductor's generated kernel
// modules call to enqueue a kernel.
//
// The generated modules are compiled without libtorch (Inductor builds them against its own C++
// prefix only), so they cannot include backend headers; they receive the entry point's address (through
// torch_openreg._C) and call it through a plain C signature.

#include "backend/Export.h"

#include <cstdint>

namespace at::openreg {

//! The address of openreg_launch_compiled_kernel, for the generated modules.
OPENREG_BACKEND_API std::uintptr_t compiled_kernel_launcher_address() noexcept;

}  // namespace at::openreg
