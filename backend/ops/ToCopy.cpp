// aten::_to_copy for openreg tensors: PyTorch's composite kernel, except that the result of a large
// synchronous device-to-host copy takes recycled host memory (Note [Recycled host destinations] in
// backend/memory/HostDestinations.cpp).

#include "backend/memory/HostDestinations.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_to_copy_native.h>
#include <torch/library.h>

#include <optional>

namespace at::openreg {
namespace {

// Whether the copy is the common `.cpu()` / `.to("cpu")` / `.to("cpu", dtype)` of a dense tensor large
// enough to recycle: synchronous, into a dense, strided, unpinned result.
bool recyclable(const at::Tensor& self, std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                std::optional<bool> pin_memory, bool non_blocking, std::optional<c10::MemoryFormat> format,
                c10::ScalarType dtype) {
  return device.has_value() && device->is_cpu() && !non_blocking && !pin_memory.value_or(false) &&
         layout.value_or(c10::Layout::Strided) == c10::Layout::Strided && self.layout() == c10::Layout::Strided &&
         format.value_or(c10::MemoryFormat::Preserve) == c10::MemoryFormat::Preserve &&
         self.is_non_overlapping_and_dense() &&
         static_cast<std::size_t>(self.numel()) * c10::elementSize(dtype) >= kRecycleAtLeast;
}

// aten::_to_copy for openreg tensors: PyTorch's composite kernel, with the result of a recyclable
// device-to-host copy allocated from the cache (same sizes and strides as the composite's
// preserve-format result of a dense tensor).
at::Tensor to_copy(const at::Tensor& self, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                   std::optional<c10::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<c10::MemoryFormat> memory_format) {
  const c10::ScalarType out_type = dtype.value_or(self.scalar_type());
  if (!recyclable(self, layout, device, pin_memory, non_blocking, memory_format, out_type)) {
    return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format);
  }
  at::Tensor result = at::detail::empty_strided_generic(self.sizes(), self.strides(), host_destination_allocator(),
                                                        c10::DispatchKeySet(c10::DispatchKey::CPU), out_type);
  result.copy_(self);
  return result;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_copy", TORCH_FN(to_copy));
}

}  // namespace at::openreg
