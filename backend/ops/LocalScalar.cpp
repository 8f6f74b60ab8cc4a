// aten::_local_scalar_dense (Tensor.item()): the one op whose result the host needs now. The value is
// copied device-to-host on the current stream, which is then synchronized, so it reflects all work
// enqueued before it (and reports any failure of that work).

#include <ATen/core/Tensor.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace at::openreg {

namespace {

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  at::Tensor host = at::empty({}, self.options().device(c10::kCPU));
  host.copy_(self.reshape({}));  // blocking D2H copy on the current stream (see Copy.cpp)
  return at::_local_scalar_dense(host);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
}

}  // namespace at::openreg
