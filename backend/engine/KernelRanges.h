#pragma once
// What a kernel reads and writes, as the device byte ranges of its tensors, for timing-only execution
// (Note [Values in timing-only execution] in sim/src/stream.cpp): the sim runs a kernel there only
// when what it reads holds the values a GPU would hold. Gathered only in that mode; elsewhere every
// call here is a load and a branch.

#include "backend/engine/Launch.h"

#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>
#include <c10/util/SmallVector.h>

#include <openreg/sim/runtime.h>
#include <openreg/sim/timing_only.h>

#include <cstddef>

namespace at::openreg {

//! The device bytes `t` spans (from its first element to past its last, strides included); empty for
//! an undefined, empty or non-openreg tensor.
inline ::openreg::sim::ByteRange device_range(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone() || !t.has_storage() || t.numel() == 0) return {};
  const std::size_t bytes = at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.itemsize());
  return {t.const_data_ptr(), bytes};
}

//! Whether every byte `t` spans holds values (always, outside timing-only execution and for host
//! tensors).
inline bool holds_values(const at::Tensor& t) {
  const ::openreg::sim::ByteRange r = device_range(t);
  return !timing_only_on() || r.bytes == 0 || ::openreg::sim::Runtime::global().holds_values(r.data, r.bytes);
}

//! Notes that `t`'s bytes now hold values (`holds`), or none: for what the host writes into device
//! memory itself (the sync path's results, collectives that move data). Nothing outside timing-only
//! execution.
inline void set_holds_values(const at::Tensor& t, bool holds) {
  const ::openreg::sim::ByteRange r = device_range(t);
  if (timing_only_on() && r.bytes != 0) ::openreg::sim::Runtime::global().set_holds_values(r.data, r.bytes, holds);
}

//! The ranges of one launch: read(t) for each tensor whose values the kernel reads, write(t) for each
//! it writes, then launch_kernel(..., ranges.access()).
class KernelRanges {
 public:
  //! Whether the ranges are gathered (timing-only execution).
  bool on() const noexcept { return on_; }
  void read(const at::Tensor& t) { add(reads_, t); }
  void write(const at::Tensor& t) { add(writes_, t); }
  //! What launch_kernel takes: null unless gathered. Valid while this object lives, unchanged.
  const ::openreg::sim::KernelAccess* access() {
    if (!on_) return nullptr;
    access_ = {reads_, writes_};
    return &access_;
  }

 private:
  void add(c10::SmallVector<::openreg::sim::ByteRange, 4>& to, const at::Tensor& t) {
    if (!on_) return;
    const ::openreg::sim::ByteRange r = device_range(t);
    if (r.bytes != 0) to.push_back(r);
  }

  bool on_ = timing_only_on();
  c10::SmallVector<::openreg::sim::ByteRange, 4> reads_;
  c10::SmallVector<::openreg::sim::ByteRange, 4> writes_;
  ::openreg::sim::KernelAccess access_;
};

}  // namespace at::openreg
