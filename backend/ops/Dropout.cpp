// native_dropout for openreg. Its CPU kernel draws from CPU's global generator (its schema has no
// Generator argument), which would make openreg's dropout ignore torch.openreg.manual_seed and depend
// on the order in which device threads run. Built from bernoulli_, which takes its seed from the
// device's generator when it is issued (Note [Random ops take their seed at enqueue time]), the masks
// follow the openreg seed and the program order only. Semantics follow the CPU kernel. On the virtual
// clock the four kernels cost CUDA's one fused dropout kernel: the input read once, the output and the
// bool mask written (Note [Kernels CUDA fuses] in engine/KernelCost.cpp).

#include "backend/engine/FusedKernel.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace at::openreg {
namespace {

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input)};
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  const double keep = 1.0 - p;
  // p == 1 keeps nothing; a scale of 0 (not inf) keeps the output finite, as on CPU.
  const double scale = keep == 0.0 ? 0.0 : 1.0 / keep;
  const double elements = static_cast<double>(input.numel());
  ::openreg::sim::KernelCost cuda_kernel;  // reads the input, writes the output and a bool mask
  cuda_kernel.bytes = elements * (2.0 * static_cast<double>(input.element_size()) + 1.0);
  cuda_kernel.kind = ::openreg::sim::KernelClass::kMemoryBound;
  const FusedKernelScope fused(cuda_kernel);
  at::Tensor mask = at::empty_like(input, at::MemoryFormat::Contiguous).bernoulli_(keep);
  at::Tensor output = input.mul(mask).mul_(scale);
  return {output, mask.to(at::kBool)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("native_dropout", &native_dropout); }

}  // namespace at::openreg
