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
#include <string>

namespace at::openreg {

//! The address of openreg_launch_compiled_kernel, for the generated modules.
OPENREG_BACKEND_API std::uintptr_t compiled_kernel_launcher_address() noexcept;

//! The bytes the calling thread's next compiled kernel reads and writes (its buffers' sizes, which the
//! generated wrapper passes before the call when a device profile is set): its cost in virtual time
//! (Note [Compiled kernels in virtual time] in python/torch_openreg/_inductor/__init__.py).
OPENREG_BACKEND_API void set_next_compiled_kernel_bytes(double bytes) noexcept;

//! Timing-only execution: enqueues, as openreg_launch_compiled_kernel would, a compiled kernel that was
//! never built: under its name, with the cost the wrapper set, running nothing (Note [Compiled kernels
//! in timing-only execution] in python/torch_openreg/_inductor/__init__.py).
OPENREG_BACKEND_API void launch_unbuilt_compiled_kernel(const std::string& name);

}  // namespace at::openreg
