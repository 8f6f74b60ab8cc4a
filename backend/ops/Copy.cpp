// Copies into, out of and between openreg devices (aten::_copy_from, which Tensor.copy_ calls when
// either side is openreg), with CUDA's blocking rules:
//  - CPU -> openreg and openreg -> CPU are byte copies (launch_copy, on the stream's copy engine) on the
//    device's current stream.
//    With non_blocking=True and pinned host memory they return at once; otherwise they wait for the
//    stream (a pageable host buffer may be reused by the caller as soon as copy_ returns).
//  - openreg:i -> openreg:j runs on i's current stream after j's current stream reached the copy, and
//    j's current stream waits for it; the host does not wait, as on CUDA.
// Byte copies need both sides dense with the same layout, dtype and conj/neg bits; anything else is
// staged (host temporaries for conversions, device kernels for strided gathers/scatters).

#include "backend/engine/KernelCost.h"
#include "backend/memory/HostAllocator.h"
#include "backend/runtime/Event.h"
#include "backend/runtime/Stream.h"
#include "backend/runtime/SyncDebug.h"
#include "backend/engine/Arguments.h"
#include "backend/engine/KernelRanges.h"
#include "backend/engine/Launch.h"
#include "backend/sanitizer/Sanitizer.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include <array>
#include <utility>

namespace at::openreg {

namespace {

using c10::openreg::current_openreg_stream;
using c10::openreg::OpenRegStream;
using c10::openreg::wait_stream;

bool is_openreg(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

bool has_lazy_bits(const at::Tensor& t) {
  return t.is_conj() || t.is_neg();
}

// Whether `t` occupies exactly [data_ptr, data_ptr + nbytes) with no pending conj/neg: then its bytes
// are its values and can be moved as one span.
bool is_plain_dense(const at::Tensor& t) {
  return t.is_non_overlapping_and_dense() && !has_lazy_bits(t);
}

// Whether copying src's bytes over dst's gives dst src's values.
bool byte_copyable(const at::Tensor& src, const at::Tensor& dst) {
  return src.dtype() == dst.dtype() && src.sizes() == dst.sizes() && src.strides() == dst.strides() &&
         is_plain_dense(src) && is_plain_dense(dst);
}

std::size_t span_bytes(const at::Tensor& t) {
  return static_cast<std::size_t>(t.numel()) * t.element_size();
}

// Enqueues a byte copy of src's span over dst's span on `stream`. A host side's storage is kept alive
// by a host callback after the copy (CUDA's host allocator guards pinned buffers with events; keeping
// them is equivalent). Device sides are not kept: a freed device block is reused only in stream order
// (Note [Stream-ordered device memory] in memory/DeviceAllocator.cpp). The callback holds storages, never
// the caller's tensors (Note [Work items hold CPU aliases, not tensors] in engine/AsyncPath.cpp). The pointers
// are taken now, so later metadata changes of dst or src on the host do not move the copy.
void enqueue_byte_copy(const OpenRegStream& stream, const at::Tensor& dst, const at::Tensor& src) {
  TORCH_INTERNAL_ASSERT(byte_copyable(src, dst));
  launch_copy(stream, dst.mutable_data_ptr(), src.const_data_ptr(), span_bytes(src), "openreg::copy");
  std::array<c10::Storage, 2> keep;
  std::size_t n = 0;
  for (const at::Tensor* t : {&dst, &src}) {
    if (!is_openreg(*t)) keep[n++] = t->storage();
  }
  if (n > 0) keep_until_done(stream, std::move(keep));
}

// Enqueues a kernel on `stream` that runs dst.copy_(src) on CPU aliases: handles dtype conversion,
// strides, broadcasting and conj/neg bits. Both tensors are openreg tensors.
void enqueue_kernel_copy(const OpenRegStream& stream, const at::Tensor& dst, const at::Tensor& src) {
  TORCH_INTERNAL_ASSERT(is_openreg(dst) && is_openreg(src), "kernel copies run on device memory only");
  // Aliases are made now (metadata as of enqueue, see fill_ in Factory.cpp); one converter, so an
  // overlapping src and dst keep sharing memory, as on CPU. The item owns the aliases only (TensorImpls
  // no one else sees), never dst, src or their memory (Note [Work items hold CPU aliases, not tensors]
  // in engine/AsyncPath.cpp).
  AliasConverter aliases(AliasTarget::kCpu);
  at::Tensor cpu_dst = aliases.convert(dst);
  at::Tensor cpu_src = aliases.convert(src);
  auto kernel = [cpu_dst = std::move(cpu_dst), cpu_src = std::move(cpu_src)]() mutable { cpu_dst.copy_(cpu_src); };
  static_assert(kTravelsInline<decltype(kernel)>, "kernel copies travel inline");
  const double bytes = static_cast<double>(dst.numel()) * static_cast<double>(dst.element_size()) +
                       static_cast<double>(src.numel()) * static_cast<double>(src.element_size());
  KernelRanges ranges;  // Note [Values in timing-only execution]
  ranges.read(src);
  ranges.write(dst);
  launch_kernel(stream, "aten::copy_", std::move(kernel), [bytes] { return bytes_kernel_cost(bytes); }, nullptr,
                ranges.access());
}

void wait_for(const OpenRegStream& stream) {
  stream.synchronize();
  ::openreg::sanitizer::on_host_wait(stream);  // a blocking copy orders the host after the stream
}

bool is_pinned(const at::Tensor& host) {
  return c10::openreg::is_pinned_ptr(host.const_data_ptr());
}

// Starts a copy between the host tensor `host` (src or dst) and a device, on the device's current
// stream, which it returns. When the bytes can move as they are, it makes the whole copy and sets
// `done`: then the host waits for the stream unless non_blocking=True and the host memory is pinned
// (CUDA's rule). Every copy that blocks is reported to the sync debug mode first.
OpenRegStream start_host_copy(const at::Tensor& src, const at::Tensor& dst, const at::Tensor& host,
                              c10::DeviceIndex device, bool non_blocking, bool& done) {
  const bool direct = byte_copyable(src, dst);
  const bool async = non_blocking && is_pinned(host);
  if (!(async && direct)) c10::openreg::warn_or_error_on_sync();
  const OpenRegStream stream = current_openreg_stream(device);
  done = direct;
  if (direct) {
    enqueue_byte_copy(stream, dst, src);
    if (!async) wait_for(stream);
  }
  return stream;
}

void copy_host_to_device(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  bool done = false;
  const OpenRegStream stream = start_host_copy(src, dst, /*host=*/src, dst.device().index(), non_blocking, done);
  if (done) return;
  // Convert on the host into dst's layout (or a contiguous one), then move bytes.
  const bool dst_plain = is_plain_dense(dst);
  at::Tensor host = dst_plain ? at::empty_strided(dst.sizes(), dst.strides(), src.options().dtype(dst.scalar_type()))
                              : at::empty(dst.sizes(), src.options().dtype(dst.scalar_type()));
  host.copy_(src);
  if (dst_plain) {
    enqueue_byte_copy(stream, dst, host);
  } else {
    at::Tensor staging = at::empty(dst.sizes(), dst.options());
    enqueue_byte_copy(stream, staging, host);
    enqueue_kernel_copy(stream, dst, staging);
  }
  wait_for(stream);
}

void copy_device_to_host(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  bool done = false;
  const OpenRegStream stream = start_host_copy(src, dst, /*host=*/dst, src.device().index(), non_blocking, done);
  if (done) return;
  // Make the device side plain and dense (a gather kernel if needed), move its bytes to a host
  // temporary, then let the CPU convert into dst.
  at::Tensor dense = src;
  if (!is_plain_dense(src)) {
    dense = at::empty(src.sizes(), src.options());
    enqueue_kernel_copy(stream, dense, src);
  }
  at::Tensor host = at::empty_strided(dense.sizes(), dense.strides(), dst.options().dtype(dense.scalar_type()));
  enqueue_byte_copy(stream, host, dense);
  wait_for(stream);
  dst.copy_(host);
}

void copy_device_to_device(const at::Tensor& src, const at::Tensor& dst) {
  const c10::DeviceIndex src_index = src.device().index();
  const c10::DeviceIndex dst_index = dst.device().index();
  const OpenRegStream src_stream = current_openreg_stream(src_index);
  if (src_index == dst_index) {
    if (byte_copyable(src, dst)) {
      enqueue_byte_copy(src_stream, dst, src);
    } else {
      enqueue_kernel_copy(src_stream, dst, src);
    }
    return;
  }
  const OpenRegStream dst_stream = current_openreg_stream(dst_index);
  // The peer copy moves plain dense bytes; gather on the source device and scatter on the destination
  // device when the layouts need it.
  at::Tensor from = src;
  if (!is_plain_dense(src)) {
    from = at::empty(src.sizes(), src.options());
    enqueue_kernel_copy(src_stream, from, src);
  }
  at::Tensor to = byte_copyable(from, dst)
                      ? dst
                      : at::empty_strided(from.sizes(), from.strides(), dst.options().dtype(from.scalar_type()));
  // Cross-stream use of blocks (Note [Stream-ordered device memory] in memory/DeviceAllocator.cpp): the
  // copy on src's stream writes `to`, a block of dst's stream. Both streams are ordered with events, as
  // CUDA's copy does, so no record_stream is needed: dst's stream waits for the copy before anything
  // later (a reuse of `to` or dst after their free included) and the copy waits for dst's earlier work.
  // Like CUDA: the copy runs on the source's current stream, after the destination's current stream
  // reached this point (earlier readers/writers of dst are done) ...
  wait_stream(/*waiter=*/src_stream, /*producer=*/dst_stream);
  enqueue_byte_copy(src_stream, to, from);
  // ... and work enqueued later on the destination's current stream sees the copied bytes.
  wait_stream(/*waiter=*/dst_stream, /*producer=*/src_stream);
  if (!to.is_same(dst)) {
    enqueue_kernel_copy(dst_stream, dst, to);
  }
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const at::Tensor& src = self;  // the schema names the source `self`
  TORCH_CHECK(src.layout() == c10::Layout::Strided && dst.layout() == c10::Layout::Strided,
              "openreg: copy_ supports only strided tensors, got ", src.layout(), " -> ", dst.layout());
  if (dst.numel() == 0) {
    return dst;
  }
  // CPU's and CUDA's copy_ check this on the host, at the call (TensorIterator's memory-overlap checks):
  // a destination that partially overlaps the source is refused, a full overlap (x.copy_(x) or the same
  // view twice) never gets here (copy_ returns early). Our kernels would otherwise copy silently (byte
  // copies) or fail only at the next synchronize (the kernel copy's CPU copy_ on the device thread).
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, src);
  // copy_ broadcasts the source to the destination's shape.
  const at::Tensor from = src.sizes() == dst.sizes() ? src : src.expand_as(dst);
  ::openreg::sanitizer::on_copy(from, dst);
  if (is_openreg(dst) && from.device().is_cpu()) {
    copy_host_to_device(from, dst, non_blocking);
  } else if (is_openreg(from) && dst.device().is_cpu()) {
    copy_device_to_host(from, dst, non_blocking);
  } else if (is_openreg(from) && is_openreg(dst)) {
    copy_device_to_device(from, dst);
  } else {
    TORCH_CHECK(false, "openreg: cannot copy from ", src.device(), " to ", dst.device());
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, /*non_blocking=*/false);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
}

// Note [Copies see conj and neg bits]
// The Conjugate and Negative fallbacks resolve lazily conjugated/negated inputs by cloning them, and a
// clone of an openreg tensor is itself a copy: _copy_from of a conj/neg view would recurse until the
// stack overflows. Our kernel resolves the bits itself (byte copies only move plain tensors; everything
// else goes through CPU copy_ on aliases that carry the bits), so these keys pass straight through.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace at::openreg
