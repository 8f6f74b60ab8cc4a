// Convolution on openreg. For a PrivateUse1 tensor ATen's convolution picks the "overrideable" backend
// and calls convolution_overrideable / convolution_backward_overrideable, which have no kernel unless
// the backend provides one. openreg runs CPU kernels, so both forward to the device-generic
// convolution / convolution_backward through the general op execution: those pick CPU's convolution
// algorithms (oneDNN, slow_conv...) when the work item runs them on CPU aliases.

#include "backend/engine/OpEngine.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace at::openreg {
namespace {

using torch::jit::Stack;

c10::OperatorHandle op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

// convolution_overrideable has exactly convolution's arguments and return.
void convolution_overrideable(const c10::OperatorHandle&, Stack* stack) {
  static const c10::OperatorHandle convolution = op_handle("aten::convolution");
  execute_op(convolution, stack);
}

// convolution_backward additionally takes bias_sizes (argument 3), which tells it the bias gradient's
// size; the overrideable form has none, so it is derived from the weight as ATen does.
void convolution_backward_overrideable(const c10::OperatorHandle&, Stack* stack) {
  static const c10::OperatorHandle backward = op_handle("aten::convolution_backward");
  constexpr size_t kArgs = 10;  // grad_output ... output_mask of the overrideable schema
  auto args = torch::jit::last(*stack, kArgs);
  const at::Tensor& weight = args[2].toTensor();
  const bool transposed = args[6].toBool();
  const int64_t groups = args[8].toInt();
  const auto mask = args[9].toBoolList();
  c10::IValue bias_sizes;
  if (mask.get(2)) {
    const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
    bias_sizes = c10::List<int64_t>({channels});
  }
  stack->insert(stack->end() - (kArgs - 3), std::move(bias_sizes));
  execute_op(backward, stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&convolution_overrideable>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&convolution_backward_overrideable>());
}

}  // namespace at::openreg
