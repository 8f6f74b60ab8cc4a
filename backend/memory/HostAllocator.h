#pragma once
// Pinned host memory for openreg (what pin_memory() returns and what non_blocking copies need to be
// asynchronous). Backed by the sim's pinned host allocations, so is_pinned answers truly. Not caching:
// pinned buffers are few and long-lived (DataLoader, staging), and the sim tracks every live one.
//
// Thread-safety: all members may be called from any thread; the deleter may run on any thread.

#include <ATen/core/CachingHostAllocator.h>

#include "backend/Export.h"

namespace c10::openreg {

class OpenRegHostAllocator final : public at::HostAllocator {
 public:
  at::DataPtr allocate(std::size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  //! Nothing to record: work items that read or write pinned memory keep its storage alive until they
  //! ran (enqueue_byte_copy in ops/Copy.cpp), which is what CUDA's recorded events guarantee.
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override;
  //! Nothing is cached.
  void empty_cache() override;
  at::HostStats get_stats() override;
  void reset_accumulated_stats() override;
  void reset_peak_stats() override;
};

//! The process-wide instance (never destroyed).
OpenRegHostAllocator& host_allocator();

//! Whether `ptr` lies in live pinned memory from this allocator; false if the runtime never started.
OPENREG_BACKEND_API bool is_pinned_ptr(const void* ptr) noexcept;

}  // namespace c10::openreg
