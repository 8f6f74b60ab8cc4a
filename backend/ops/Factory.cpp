// Factory kernels for openreg: empty / empty_strided allocate through the caching device allocator on
// the requested device; fill_ is enqueued on the current stream like any kernel (launch_kernel).

#include "backend/engine/KernelCost.h"
#include "backend/memory/DeviceAllocator.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"
#include "backend/engine/Arguments.h"
#include "backend/engine/KernelRanges.h"
#include "backend/engine/Launch.h"
#include "backend/sanitizer/Sanitizer.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <utility>

namespace at::openreg {

namespace {

using c10::openreg::check_device_index;
using c10::openreg::current_device;

c10::Device resolve_device(std::optional<c10::Device> device) {
  c10::Device d = device.value_or(c10::Device(c10::DeviceType::PrivateUse1));
  TORCH_INTERNAL_ASSERT(d.type() == c10::DeviceType::PrivateUse1, "openreg factory called for ", d);
  if (!d.has_index()) {
    d.set_index(current_device());
  }
  check_device_index(d.index());
  return d;
}

void check_factory_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "openreg supports only strided tensors, got layout ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
}

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_factory_options(layout, pin_memory);
  const c10::Device d = resolve_device(device);
  c10::OptionalDeviceGuard guard;  // the allocator allocates on the current device
  if (d.index() != current_device()) guard.reset_device(d);
  return at::detail::empty_generic(size, &c10::openreg::device_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_factory_options(layout, pin_memory);
  const c10::Device d = resolve_device(device);
  c10::OptionalDeviceGuard guard;
  if (d.index() != current_device()) guard.reset_device(d);
  return at::detail::empty_strided_generic(size, stride, &c10::openreg::device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  if (self.numel() == 0) {
    return self;
  }
  ::openreg::sanitizer::on_kernel("aten::fill_.Scalar", {}, {&self});
  // The CPU alias is made now, so later in-place metadata changes of `self` on this thread (resize_,
  // t_, set_) cannot change what the pending kernel writes. The item owns the alias only, neither
  // `self` nor its memory (Note [Work items hold CPU aliases, not tensors] in engine/AsyncPath.cpp).
  auto kernel = [alias = cpu_alias_of(self), value = c10::Scalar(value)] { alias.fill_(value); };
  static_assert(kTravelsInline<decltype(kernel)>, "fill_ travels inline");
  const double bytes = static_cast<double>(self.numel()) * static_cast<double>(self.element_size());
  KernelRanges ranges;  // reads nothing: a small fill gives values (Note [Values in timing-only execution])
  ranges.write(self);
  launch_kernel(c10::openreg::current_openreg_stream(self.device().index()), "aten::fill_.Scalar", std::move(kernel),
                [bytes] { return bytes_kernel_cost(bytes); }, nullptr, ranges.access());
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
}

}  // namespace at::openreg
