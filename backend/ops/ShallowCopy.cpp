// Note [Shallow-copy compatibility of openreg and CPU tensors]
// `tensor.data = other` and nn.Module._apply (Module.to) swap a tensor's implementation in place only
// when aten::_has_compatible_shallow_copy_type says the two TensorImpls are interchangeable; otherwise
// _apply makes new Parameters, which breaks tied weights and optimizers built before .to(). TensorImpl
// knows CPU and CUDA dense tensors are interchangeable but not PrivateUse1, and its comment asks a
// PrivateUse1 backend to override the operator. An openreg dense tensor is a plain TensorImpl (no
// subclass, no extra fields), so swapping it with a CPU dense one only moves storage, sizes, strides
// and the key set, exactly what CPU <-> CUDA does.
//
// The override is registered for PrivateUse1, so it is reached whenever either argument is openreg
// (PrivateUse1 outranks CPU in the dispatch key set); a backend kernel also stops the op's
// CompositeImplicitAutograd kernel from claiming AutogradPrivateUse1.

#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace at::openreg {
namespace {

bool is_dense_cpu_or_openreg(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  // Plain TensorImpls only: wrapper subclasses (functional, nested, ...) carry state a swap would lose.
  return t.layout() == c10::kStrided && !t.is_quantized() && (t.is_cpu() || t.is_privateuseone()) &&
         typeid(*impl) == typeid(c10::TensorImpl);
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (is_dense_cpu_or_openreg(self) && is_dense_cpu_or_openreg(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace at::openreg
