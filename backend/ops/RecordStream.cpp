// Tensor.record_stream(s) for openreg tensors: marks the tensor's block as used on `s`, so that when it
// is freed the caching allocator reuses it only after the work `s` had at that point completed
// (Note [Stream-ordered device memory] in memory/DeviceAllocator.cpp).

#include "backend/memory/DeviceAllocator.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>
#include <torch/library.h>

namespace at::openreg {
namespace {

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK_VALUE(stream.device_type() == c10::DeviceType::PrivateUse1,
                    "record_stream: expected an openreg stream, got a stream of device type ", stream.device_type());
  c10::openreg::device_allocator().recordStream(self.storage().data_ptr(), stream);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", TORCH_FN(record_stream));
}

}  // namespace at::openreg
