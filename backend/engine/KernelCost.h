#pragma once
// What an op's kernel costs on a device profile (virtual time, Note [Virtual time] in
// sim/src/virtual_clock.cpp): its FLOPs as torch.utils.flop_counter counts them for matmuls,
// convolutions and attention, and the bytes it reads and writes, with the number format its math runs
// in, and its op class for where a device's time goes (Note [Where time goes] in
// sim/src/virtual_clock.cpp). Computed at enqueue, only when a profile is set (launch_kernel_costed).
//
// Thread-safety: pure functions of their arguments (and of ATen's global TF32 flags, read at the call).

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <openreg/sim/cost.h>

#include <optional>

#include "backend/Export.h"

namespace at::openreg {

//! The cost of `op` called with `args` (its schema's arguments), writing `fresh` (its new outputs)
//! and the arguments its schema marks written.
::openreg::sim::KernelCost op_kernel_cost(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                                          c10::ArrayRef<at::Tensor> fresh);

//! A memory-bound kernel moving `bytes` (a copy, a fill).
::openreg::sim::KernelCost bytes_kernel_cost(double bytes);

//! The device time (ns) the profile models for a kernel of `flops` and `bytes` computing in `dtype`
//! (on the matrix units when `matrix`, with PyTorch's TF32 flag for fp32), of unknown shape; nullopt
//! without a device profile. For Inductor's runtime estimates (Note [Inductor's runtime estimates]).
OPENREG_BACKEND_API std::optional<double> modelled_kernel_ns(double flops, double bytes, at::ScalarType dtype,
                                                             bool matrix);

//! The number format of `dtype`'s math; fp32 matmuls count as tf32 when `tf32_allowed`.
::openreg::sim::NumberFormat number_format(at::ScalarType dtype, bool tf32_allowed);

}  // namespace at::openreg
