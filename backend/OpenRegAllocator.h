#pragma once
// The caching device allocator for openreg tensors, registered for PrivateUse1 so that
// torch.accelerator.memory_* and torch.openreg.memory_* work.
//
// Blocks are cached per device in two pools, like CUDA's: small (requests up to 1 MiB, rounded to 512
// bytes) and large (rounded to 512 bytes, reused with bounded slack). Blocks are not split: every
// cached block is one sim allocation ("segment"). When the sim runs out of memory the device's cache
// is released and the allocation retried once; a second failure raises torch.OutOfMemoryError.
//
// Thread-safety: every member may be called from any thread; the deleter of a returned DataPtr may
// run on any thread (device workers included) and never touches Python.

#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>
#include <utility>

namespace c10::openreg {

class OpenRegDeviceAllocator final : public c10::DeviceAllocator {
 public:
  //! Requests up to this size use the small pool.
  static constexpr std::size_t kSmallSize = 1 << 20;
  //! Every block size is a multiple of this.
  static constexpr std::size_t kRoundBytes = 512;

  //! Allocates on the calling thread's current openreg device.
  c10::DataPtr allocate(std::size_t nbytes) override;
  //! Plain memcpy: device memory is host-addressable; the caller orders it after pending work.
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override;
  //! Returns every cached (unused) block of every device to the sim.
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  //! Nothing to do, see Note [Blocks are freed only after their work ran].
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  //! {free, total} bytes of the device, as the sim accounts them.
  std::pair<std::size_t, std::size_t> getMemoryInfo(c10::DeviceIndex device) override;

  //! Number of cached (free, reserved) blocks on a device; for tests.
  std::size_t cached_block_count(c10::DeviceIndex device);
};

//! The process-wide instance (never destroyed: deleters may run during static destruction).
OpenRegDeviceAllocator& device_allocator();

}  // namespace c10::openreg
