#pragma once
// Whether the calling thread is inside an optimizer's step (Note [Optimizer steps on the virtual clock]
// in engine/KernelCost.cpp): the layer above says so around torch.optim's steps, and the kernel
// costs made on this thread meanwhile count their memory-bound kernels as the optimizer's.
//
// Thread-safety: a thread-local flag; each thread sets and reads its own.

#include "backend/Export.h"

namespace at::openreg {

//! Marks the calling thread as inside (true) or outside (false) an optimizer step.
OPENREG_BACKEND_API void set_in_optimizer_step(bool inside) noexcept;

//! Whether the calling thread is inside an optimizer step.
bool in_optimizer_step() noexcept;

}  // namespace at::openreg
