#pragma once
// Costing an op that openreg builds from several kernels as the one kernel CUDA runs for it (Note
// [Kernels CUDA fuses] in engine/KernelCost.cpp).
//
// Thread-safety: the scope is the calling thread's; kernels issued by other threads are not in it.

#include <openreg/sim/cost.h>

namespace at::openreg {

//! While alive, the kernels this thread issues cost, together, what `fused` costs: the first one
//! `fused`, the others nothing beyond the device's minimum kernel time. Only times change, never values.
class FusedKernelScope {
 public:
  explicit FusedKernelScope(const ::openreg::sim::KernelCost& fused) noexcept;
  ~FusedKernelScope();
  FusedKernelScope(const FusedKernelScope&) = delete;
  FusedKernelScope& operator=(const FusedKernelScope&) = delete;

 private:
  const ::openreg::sim::KernelCost* outer_;
  bool outer_spent_;
};

}  // namespace at::openreg
