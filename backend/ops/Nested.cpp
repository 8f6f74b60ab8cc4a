// Note [Nested tensors on openreg]
// PyTorch takes nested-tensor paths on PrivateUse1 devices as on CUDA: nn.TransformerEncoder in
// inference with a padding mask packs its input with _nested_tensor_from_mask, runs every layer's fast
// path (_transformer_encoder_layer_fwd) on the nested tensor and unpacks it with to_padded_tensor.
// ATen's nested kernels are registered for CPU and CUDA only, so the engine ran _nested_tensor_from_mask
// on CPU and then could not move its nested result to the device ("NestedTensorImpl doesn't support
// strides"), and an openreg nested tensor had no kernel for anything.
//
// openreg's nested tensors are ATen's NestedTensorImpl over an openreg buffer (the dispatch key
// NestedTensorPrivateUse1). Their ops, and the ops that make them from dense openreg tensors, run on
// CPU (Note [Running an op on the host]). Nested tensors are an inference fast path in these uses, so
// correctness first.

#include "backend/ops/HostRoundTrip.h"

#include <torch/library.h>

namespace at::openreg {

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
}

namespace {
// Ops such as linear and matmul have a CompositeImplicitAutograd kernel besides their nested kernels
// for CPU and CUDA: on openreg they decomposed into dense ops that cannot take a nested tensor.
const bool g_nested_kernels_registered = [] {
  static torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::NestedTensorPrivateUse1, __FILE__,
                            __LINE__);
  register_host_kernels_like(lib, c10::DispatchKey::NestedTensorCPU);
  return true;
}();
}  // namespace

// The ops that make nested tensors from dense ones (their kernels are CPU's and CUDA's).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"_nested_tensor_from_mask", "_nested_from_padded", "_nested_tensor_from_tensor_list",
                           "_nested_from_padded_and_nested_example"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
  }
}

}  // namespace at::openreg
