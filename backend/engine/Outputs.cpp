#include "backend/engine/Outputs.h"

#include "backend/engine/Arguments.h"

#include <ATen/ops/empty_strided.h>
#include <c10/core/TensorImpl.h>

#include <utility>

namespace at::openreg {

at::Tensor allocate_like(const TensorGeometry& g, c10::DeviceIndex device) {
  if (!g.defined) return at::Tensor();  // convolution_backward's masked gradients stay undefined
  return at::empty_strided(g.sizes, g.strides,
                           at::TensorOptions().dtype(g.dtype).device(c10::DeviceType::PrivateUse1, device));
}

at::Tensor view_over(const at::Tensor& base, const TensorGeometry& g) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(base.storage()),
                                                   base.key_set(), c10::scalarTypeToTypeMeta(g.dtype));
  impl->set_sizes_and_strides(g.sizes, g.strides, g.storage_offset);
  impl->_set_conj(g.conj);
  impl->_set_neg(g.neg);
  return at::Tensor(std::move(impl));
}

bool same_geometry(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() && a.storage_offset() == b.storage_offset();
}

void restride(const at::Tensor& real, c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset) {
  real.resize_(sizes);
  if (real.strides() == strides && real.storage_offset() == offset) return;
  int64_t span = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) span = 0;
    if (span != 0) span += (sizes[d] - 1) * strides[d];
  }
  const int64_t needed = (offset + span) * static_cast<int64_t>(real.element_size());
  if (needed > static_cast<int64_t>(real.storage().nbytes())) {
    real.resize_({offset + span});  // grows the storage (keeping its contents); the shape is reset below
  }
  real.as_strided_(sizes, strides, offset);
}

bool adopt_written_geometry(const OpPlan& plan, c10::ArrayRef<c10::IValue> real, c10::ArrayRef<c10::IValue> standin) {
  bool changed = false;
  for (size_t i = 0; i < plan.args.size(); ++i) {
    if (!plan.args[i].written) continue;
    for_each_tensor(real[i], plan.args[i].kind, [&](const at::Tensor& t, TensorPosition p) {
      const at::Tensor& like = p.tensor_in(standin[i]);
      if (same_geometry(t, like)) return;
      restride(t, like.sizes(), like.strides(), like.storage_offset());
      changed = true;
    });
  }
  return changed;
}

}  // namespace at::openreg
