#pragma once
// The caching device allocator for openreg tensors, registered for PrivateUse1 so that
// torch.accelerator.memory_* and torch.openreg.memory_* work. Its rules are CUDA's caching allocator's
// (Note [Stream-ordered device memory] in memory/DeviceAllocator.cpp):
//  - a block belongs to the stream current at its allocation; freed, it is reusable at once by later
//    allocations on that stream, and by no other stream;
//  - Tensor.record_stream(s) makes a freed block wait for the work s had at the free;
//  - small (<= 1 MiB, 2 MiB segments) and large pools, 512-byte rounding, split and merge (the sizes
//    are in memory/BlockCache.h);
//  - out of memory: wait for queued work, release cached segments, retry, then raise
//    torch.OutOfMemoryError;
//  - statistics with CUDA's names, history recording and snapshots for torch.cuda._memory_viz.
//
// Thread-safety: every member may be called from any thread; the deleter of a returned DataPtr may
// run on any thread and never touches Python. No member waits for a device while holding a lock.

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "backend/Export.h"
#include "backend/memory/DeviceSnapshot.h"

namespace openreg::sim {
class Stream;
}  // namespace openreg::sim

namespace c10::openreg {

class CollectiveEvent;

class OPENREG_BACKEND_API OpenRegDeviceAllocator final : public c10::DeviceAllocator {
 public:
  //! Allocates on the calling thread's current openreg device, for its current stream there.
  c10::DataPtr allocate(std::size_t nbytes) override;
  //! Plain memcpy: device memory is host-addressable. The caller orders it after pending work, which
  //! includes work queued on a fresh block's stream before its previous owner freed it.
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override;
  //! Waits for the work that may still use cached blocks, then returns every unsplit cached segment
  //! of every device to the sim (counts num_sync_all_streams).
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  //! Marks the block behind `ptr` as used on `stream`: at its free an event is recorded there and the
  //! block is reused only once it completed. Pointers of other allocators are ignored, as on CUDA.
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  //! Marks the block behind `ptr` as used by a collective in flight: freed, it is reused only once the
  //! collective has ended, while its bytes leave the allocated count at the free, as record_stream
  //! does (Note [Stream-ordered collectives] in python/torch_openreg/_distributed/_comm_queue.py).
  //! Pointers of other allocators are ignored.
  void hold_until(const c10::DataPtr& ptr, const CollectiveEvent& end);
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  //! {free, total} bytes of the device, as the sim accounts them.
  std::pair<std::size_t, std::size_t> getMemoryInfo(c10::DeviceIndex device) override;

  //! Allocates `nbytes` on `stream`'s device for `stream` (caching_allocator_alloc).
  c10::DataPtr allocate_on(c10::Stream stream, std::size_t nbytes);
  //! Caps the bytes the device's cache may reserve at fraction * capacity (0 < fraction <= 1).
  void set_memory_fraction(double fraction, c10::DeviceIndex device);

  //! Starts (or stops, when `enabled` is false) recording allocator events into a ring of
  //! `max_entries`. `context` (may be null) is called on the allocating thread, outside every lock,
  //! to capture a stack for each recorded allocation (and free, when `when` is ALL).
  void record_history(bool enabled, c10::CachingDeviceAllocator::CreateContextFn context,
                      std::size_t max_entries, c10::CachingDeviceAllocator::RecordContext when);
  //! Segments, blocks and history of every started device, indexed by device.
  std::vector<DeviceSnapshot> snapshot();

  // Private memory pools of a device (Note [Private memory pools] in memory/BlockCache.cpp): a graph's
  // pool and torch.openreg.MemPool's.
  //! Creates pool `id` (use count 1) or adds a use.
  void create_or_incref_pool(c10::DeviceIndex device, c10::MempoolId_t id);
  //! Sends the device's allocations for which `filter(stream)` holds to pool `id` (created or
  //! incref'd first), until end_allocate_to_pool. `filter` runs under the device cache's lock.
  void begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t id,
                              std::function<bool(::openreg::sim::Stream*)> filter);
  //! Sends the calling thread's allocations on `device` to pool `id` (use_mem_pool).
  void begin_allocate_current_thread_to_pool(c10::DeviceIndex device, c10::MempoolId_t id);
  void end_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t id);
  //! Drops a use of pool `id`; with none left, empty_cache releases its free segments.
  void release_pool(c10::DeviceIndex device, c10::MempoolId_t id);
  int pool_use_count(c10::DeviceIndex device, c10::MempoolId_t id);

  //! Number of free cached blocks on a device (pending record_stream frees excluded); for tests.
  std::size_t cached_block_count(c10::DeviceIndex device);
};

//! The process-wide instance (never destroyed: deleters may run during static destruction).
OPENREG_BACKEND_API OpenRegDeviceAllocator& device_allocator();

}  // namespace c10::openreg
