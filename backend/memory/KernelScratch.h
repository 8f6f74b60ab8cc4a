#pragma once
// Host memory for the CPU allocations of kernels running on compute threads: Note [Kernel scratch
// memory] in memory/KernelScratch.cpp.

#include <c10/macros/Macros.h>

#include <cstddef>

#include "backend/Export.h"

namespace at::openreg {

//! Marks the calling compute thread as running a kernel for its lifetime: its large CPU allocations
//! come from the scratch cache. Nests (an inner scope changes nothing).
class OPENREG_BACKEND_API KernelScratchScope {
 public:
  KernelScratchScope() noexcept;
  ~KernelScratchScope();
  C10_DISABLE_COPY_AND_ASSIGN(KernelScratchScope);

 private:
  bool outer_;
};

//! Bytes of freed kernel allocations held for reuse.
OPENREG_BACKEND_API std::size_t kernel_scratch_cached_bytes();
//! Frees every held block (part of torch.openreg.empty_cache()).
OPENREG_BACKEND_API void kernel_scratch_release_cached();

}  // namespace at::openreg
