#include "backend/memory/DeviceAllocator.h"

#include "backend/memory/BlockCache.h"
#include "backend/runtime/CollectiveEvent.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"
#include "backend/runtime/SimErrors.h"
#include "backend/memory/CacheRegistry.h"

#include <c10/util/Exception.h>

#include <openreg/sim/device.h>
#include <openreg/sim/memory.h>
#include <openreg/sim/stream.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

// Note [Stream-ordered device memory]
// The rules are CUDA's caching allocator's. A block belongs to the stream that was current on the
// allocating thread. When its DataPtr is freed (the last tensor reference goes) it returns to the cache
// at once, memory_allocated drops, and the next allocation *on the same stream* may take it although
// work queued earlier on that stream may still read or write it: that work runs before anything the
// new owner enqueues on the stream, so stream order makes the reuse safe. Work items therefore keep
// only raw pointers (CPU aliases) into device memory, never the device storages.
//
// Other streams: a block is never handed to an allocation of another stream while it is cached. If the
// program used the tensor on other streams it calls Tensor.record_stream(s) for each; at the free an
// event is recorded on each such stream and the block joins the cache only once they all completed
// (checked lazily on later allocations, waited for on the out-of-memory path). The backend's own
// cross-stream work (peer copies) orders both streams with events, as CUDA's copy does, so it needs
// no record. Without record_stream a program that frees a tensor still in use on another stream
// races, exactly as on CUDA.
//
// Host memory: a cached block's memory stays valid for work still queued on it because cached memory
// returns to the sim only after the streams that may use it reached the point of the free: emptyCache
// and the out-of-memory path first record an event on every stream that owns blocks of the device and
// wait for those events and for the pending record_stream events (CUDA's cudaFree synchronizes the
// device the same way; each such wait counts in num_sync_all_streams). Blocks freed while that wait was
// in progress are not released (their free generation is newer than the wait). Waits use events of our
// own, so a failed work item's error stays on its stream for the program to see.
//
// Host writes: unlike CUDA, the host can write device memory directly. A fresh block may still be used
// by work queued on its stream before its previous owner freed it (by another thread), so host code
// that writes a fresh block without going through the stream first waits for that stream (the sync
// path's results in engine/SyncPath.cpp, resize in ops/Resize.cpp).
//
// Locks: one mutex per device guards its cache and statistics (memory/BlockCache.h). Nothing waits
// for a device, records an event, or calls the context gatherer (which may take the GIL) while holding
// it.

namespace c10::openreg {

namespace sim = ::openreg::sim;
using c10::CachingDeviceAllocator::CreateContextFn;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::RecordContext;
using detail::Block;
using detail::DeviceCache;

namespace {

// Caches are created on a device's first allocation and never destroyed (deleters may run during
// static destruction). Acquire/release: a reader that sees the pointer sees the constructed cache.
std::array<std::atomic<DeviceCache*>, kMaxDevices> g_caches{};
// Serialises creation only. Leaked, like every object device threads touch (Note [Teardown at exit]
// in sim/src/runtime.cpp).
std::mutex& caches_mutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

DeviceCache* existing_cache(c10::DeviceIndex device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_caches[device].load(std::memory_order_acquire);
}

DeviceCache& cache(c10::DeviceIndex device) {
  if (DeviceCache* c = existing_cache(device)) return *c;
  sim::DeviceMemory& memory = sim_device(device).memory();  // checks the index, starts the device
  std::lock_guard<std::mutex> lock(caches_mutex());
  DeviceCache* c = g_caches[device].load(std::memory_order_relaxed);  // creation is under the mutex
  if (c == nullptr) {
    c = new DeviceCache(device, memory);
    g_caches[device].store(c, std::memory_order_release);
  }
  return *c;
}

// torch.profiler(profile_memory=True)'s memory timeline, as CUDA's allocator reports it: block sizes,
// with the totals after the change. Read before free(): the block may be merged away by it.
void report_to_profiler(DeviceCache& c, const void* ptr, std::int64_t delta, c10::DeviceIndex device) {
  if (C10_LIKELY(!c10::memoryProfilingEnabled())) return;
  const DeviceStats stats = c.stats();
  const auto all = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  c10::reportMemoryUsageToProfiler(const_cast<void*>(ptr), delta, stats.allocated_bytes[all].current,
                                   stats.reserved_bytes[all].current, c10::Device(c10::DeviceType::PrivateUse1, device));
}

void delete_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  DeviceCache& c = *existing_cache(block->device);
  const void* ptr = block->ptr;
  const auto size = static_cast<std::int64_t>(block->size);
  const c10::DeviceIndex device = block->device;
  c.free(block);
  report_to_profiler(c, ptr, -size, device);
}

c10::DataPtr allocate_for(c10::DeviceIndex device, sim::Stream& stream, std::size_t nbytes) {
  DeviceCache& c = cache(device);
  const c10::Device where(c10::DeviceType::PrivateUse1, device);
  if (nbytes == 0) return c10::DataPtr(nullptr, where);
  Block* block = translate_sim_errors([&] { return c.malloc(&stream, nbytes); });
  report_to_profiler(c, block->ptr, static_cast<std::int64_t>(block->size), device);
  return c10::DataPtr(block->ptr, block, &delete_block, where);
}

}  // namespace

c10::DataPtr OpenRegDeviceAllocator::allocate(std::size_t nbytes) {
  const c10::DeviceIndex device = current_device();
  return allocate_for(device, current_openreg_stream(device).sim(), nbytes);
}

c10::DataPtr OpenRegDeviceAllocator::allocate_on(c10::Stream stream, std::size_t nbytes) {
  return allocate_for(stream.device_index(), OpenRegStream(stream).sim(), nbytes);
}

void OpenRegDeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool OpenRegDeviceAllocator::initialized() {
  return true;  // caches are created lazily per device
}

void OpenRegDeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  // The device blocks, the recycled host blocks of device-to-host results and the kernels' scratch
  // memory: every cache openreg keeps (Note [One registry of releasable caches]).
  release_every_cache();
}

namespace {
void release_device_blocks() {
  for (c10::DeviceIndex d = 0; d < kMaxDevices; ++d) {
    if (DeviceCache* c = existing_cache(d)) translate_sim_errors([&] { c->empty_cache(); });
  }
}
const bool g_device_blocks_registered =
    (register_releasable_cache({"device blocks", &release_device_blocks}), true);
}  // namespace

void OpenRegDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr || ptr.get_deleter() != &delete_block) return;  // not ours, as on CUDA
  auto* block = static_cast<Block*>(ptr.get_context());
  sim::Stream& s = OpenRegStream(stream).sim();
  existing_cache(block->device)->record_stream(block, &s);
}

void OpenRegDeviceAllocator::hold_until(const c10::DataPtr& ptr, const CollectiveEvent& end) {
  if (ptr.get() == nullptr || ptr.get_deleter() != &delete_block) return;
  auto* block = static_cast<Block*>(ptr.get_context());
  existing_cache(block->device)->record_end(block, end.end_event());
}

DeviceStats OpenRegDeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  check_device_index(device);
  DeviceCache* c = existing_cache(device);
  return c != nullptr ? c->stats() : DeviceStats();
}

void OpenRegDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  check_device_index(device);
  if (DeviceCache* c = existing_cache(device)) c->reset_accumulated();
}

void OpenRegDeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  check_device_index(device);
  if (DeviceCache* c = existing_cache(device)) c->reset_peak();
}

std::pair<std::size_t, std::size_t> OpenRegDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  sim::DeviceMemory& memory = cache(device).memory();
  const std::uint64_t total = memory.capacity();
  const std::uint64_t used = memory.allocated();
  return {static_cast<std::size_t>(total > used ? total - used : 0), static_cast<std::size_t>(total)};
}

void OpenRegDeviceAllocator::set_memory_fraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK_VALUE(fraction > 0 && fraction <= 1, "invalid fraction: ", fraction,
                    ". Please set within (0, 1].");
  DeviceCache& c = cache(device);
  c.set_limit(static_cast<std::uint64_t>(fraction * static_cast<double>(c.memory().capacity())));
}

void OpenRegDeviceAllocator::record_history(bool enabled, CreateContextFn context, std::size_t max_entries,
                                            RecordContext when) {
  detail::set_history(enabled, context, max_entries, when);
  if (!enabled) {
    for (c10::DeviceIndex d = 0; d < kMaxDevices; ++d) {
      if (DeviceCache* c = existing_cache(d)) c->clear_trace();
    }
  }
}

std::vector<DeviceSnapshot> OpenRegDeviceAllocator::snapshot() {
  std::vector<DeviceSnapshot> out;
  for (c10::DeviceIndex d = 0; d < kMaxDevices; ++d) {
    DeviceCache* c = existing_cache(d);
    if (c == nullptr) {
      if (d >= device_count()) break;
      out.emplace_back();
      continue;
    }
    out.push_back(c->snapshot());
  }
  return out;
}

void OpenRegDeviceAllocator::create_or_incref_pool(c10::DeviceIndex device, c10::MempoolId_t id) {
  cache(device).create_or_incref_pool(id);
}

void OpenRegDeviceAllocator::begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t id,
                                                    std::function<bool(sim::Stream*)> filter) {
  DeviceCache& c = cache(device);
  c.create_or_incref_pool(id);
  c.begin_allocate_to_pool(id, std::move(filter));
}

void OpenRegDeviceAllocator::begin_allocate_current_thread_to_pool(c10::DeviceIndex device, c10::MempoolId_t id) {
  const std::thread::id thread = std::this_thread::get_id();
  begin_allocate_to_pool(device, id, [thread](sim::Stream*) { return std::this_thread::get_id() == thread; });
}

void OpenRegDeviceAllocator::end_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t id) {
  if (DeviceCache* c = existing_cache(device)) c->end_allocate_to_pool(id);
}

void OpenRegDeviceAllocator::release_pool(c10::DeviceIndex device, c10::MempoolId_t id) {
  if (DeviceCache* c = existing_cache(device)) c->release_pool(id);
}

int OpenRegDeviceAllocator::pool_use_count(c10::DeviceIndex device, c10::MempoolId_t id) {
  DeviceCache* c = existing_cache(device);
  return c != nullptr ? c->pool_use_count(id) : 0;
}

std::size_t OpenRegDeviceAllocator::cached_block_count(c10::DeviceIndex device) {
  check_device_index(device);
  DeviceCache* c = existing_cache(device);
  return c != nullptr ? c->cached_count() : 0;
}

OpenRegDeviceAllocator& device_allocator() {
  static auto* instance = new OpenRegDeviceAllocator();
  return *instance;
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &device_allocator());

}  // namespace c10::openreg
