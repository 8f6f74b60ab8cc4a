// resize_ and set_ for openreg tensors, and the storage resize behind them and behind
// UntypedStorage.resize_ (hooks' resizePrivateUse1Bytes). Metadata changes happen on the calling thread;
// a storage that grows waits for its device's pending work, then copies its old bytes on the host.

#include "backend/ops/Resize.h"

#include "backend/memory/DeviceAllocator.h"
#include "backend/runtime/Device.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/set_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>

namespace at::openreg {

void resize_storage_bytes(c10::StorageImpl* storage, std::size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const c10::Device device = storage->device();
  TORCH_INTERNAL_ASSERT(device.type() == c10::DeviceType::PrivateUse1, "resizing a ", device, " storage");
  c10::Allocator* allocator = storage->allocator() != nullptr ? storage->allocator() : &c10::openreg::device_allocator();
  c10::DeviceGuard guard(device);  // the allocator allocates on the current device
  c10::DataPtr fresh = allocator->allocate(nbytes);
  const std::size_t keep = std::min(storage->nbytes(), nbytes);
  if (keep > 0) {
    // Pending work items hold raw pointers into the current allocation (taken when they were
    // enqueued). The old bytes are copied on the host, so they must be final: let every stream of the
    // device finish first (the old block then returns to its stream's cache with no work pending).
    // Nothing to copy (resize_(0), as FSDP2 frees unsharded parameters): the old block is freed like
    // any tensor's, stream-ordered, as CUDA's caching allocator does; no host wait (which could stall
    // behind a collective that needs this thread's GIL to be issued).
    c10::openreg::synchronize_device(device.index());
    std::memcpy(fresh.get(), storage->data(), keep);
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

namespace {

// Grows the storage when the (already set) sizes, strides and offset of `impl` need more bytes.
void ensure_storage_fits(c10::TensorImpl* impl) {
  if (impl->numel() == 0) {
    return;  // no bytes needed, whatever the offset
  }
  const std::size_t needed = at::detail::computeStorageNbytes(impl->sizes(), impl->strides(),
                                                              impl->dtype().itemsize(), impl->storage_offset());
  const c10::Storage& storage = impl->unsafe_storage();
  if (needed > storage.nbytes()) {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), needed);
  }
}

const at::Tensor& resize_(const at::Tensor& self, at::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, size, /*stride=*/std::nullopt, /*resize_storage=*/false);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "Unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  ensure_storage_fits(impl);
  return self;
}

at::Tensor& set_storage_offset_(at::Tensor& self, at::Storage source, int64_t storage_offset,
                                at::IntArrayRef size, at::IntArrayRef stride) {
  at::native::checkSetStorage(self, std::move(source), storage_offset, size, stride);
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_storage_offset(storage_offset);
  const at::OptionalIntArrayRef stride_opt =
      stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : std::nullopt;
  at::native::resize_impl_cpu_(impl, size, stride_opt, /*resize_storage=*/false);
  ensure_storage_fits(impl);
  return self;
}

at::Tensor& set_empty_(at::Tensor& self) {
  const caffe2::TypeMeta dtype = self.dtype();
  c10::DeviceGuard guard(self.device());  // the empty storage belongs to self's device
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &c10::openreg::device_allocator(), /*resizable=*/true);
  self.set_(std::move(storage), 0, {0}, {});
  TORCH_INTERNAL_ASSERT(dtype == self.dtype());
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset_));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("set_", TORCH_FN(set_empty_));
}

}  // namespace at::openreg
