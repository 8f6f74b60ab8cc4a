#include "backend/ops/ExecuteAliases.h"

#include <c10/core/Allocator.h>
#include <c10/core/TensorImpl.h>

#include <cstring>

namespace at::openreg {
namespace {

c10::Storage make_standin_storage(const c10::Storage& real, AliasTarget target) {
  if (target == AliasTarget::kMeta) {
    // Resizable, so an out= argument that the meta kernel resizes shows the new shape.
    return c10::Storage(c10::Storage::use_byte_size_t(), real.nbytes(), c10::GetAllocator(c10::kMeta),
                        /*resizable=*/true);
  }
  if (target == AliasTarget::kCpuScratch) {
    // Resizable for the same reason as Meta's; zeroed, so kernels read defined values (a bool is 0).
    c10::Storage scratch(c10::Storage::use_byte_size_t(), real.nbytes(), c10::GetAllocator(c10::kCPU),
                         /*resizable=*/true);
    if (real.nbytes() > 0) std::memset(scratch.mutable_data(), 0, real.nbytes());
    return scratch;
  }
  // Not resizable and no deleter: the bytes belong to the device allocator, and the fallback has
  // already given every output its final size, so a resize here would be our bug and must fail.
  void* data = const_cast<void*>(real.data_ptr().get());
  return c10::Storage(c10::Storage::use_byte_size_t(), real.nbytes(),
                      c10::DataPtr(data, c10::Device(c10::kCPU)), /*allocator=*/nullptr,
                      /*resizable=*/false);
}

at::Tensor make_standin(const at::Tensor& t, c10::Storage storage, AliasTarget target) {
  auto key = target == AliasTarget::kMeta ? c10::DispatchKey::Meta : c10::DispatchKey::CPU;
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  if (t.is_conj()) impl->_set_conj(true);
  if (t.is_neg()) impl->_set_neg(true);
  return at::Tensor(std::move(impl));
}

}  // namespace

const c10::Storage& AliasConverter::standin_storage(const c10::Storage& real) {
  for (const auto& [r, s] : storages_) {
    if (r.unsafeGetStorageImpl() == real.unsafeGetStorageImpl()) return s;
  }
  storages_.emplace_back(real, make_standin_storage(real, target_));
  return storages_.back().second;
}

at::Tensor AliasConverter::convert(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone()) return t;
  return make_standin(t, standin_storage(t.storage()), target_);
}

const c10::Storage* AliasConverter::source_of(const c10::StorageImpl* standin) const {
  for (const auto& [r, s] : storages_) {
    if (s.unsafeGetStorageImpl() == standin) return &r;
  }
  return nullptr;
}

at::Tensor cpu_alias_of(const at::Tensor& t) {
  return make_standin(t, make_standin_storage(t.storage(), AliasTarget::kCpu), AliasTarget::kCpu);
}

}  // namespace at::openreg
