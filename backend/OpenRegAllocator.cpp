#include "backend/OpenRegAllocator.h"

#include "backend/OpenRegRuntime.h"

#include <c10/util/Exception.h>

#include <openreg/sim/error.h>
#include <openreg/sim/event.h>
#include <openreg/sim/memory.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
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
// Locks: one mutex per device guards its cache and statistics. Nothing waits for a device, records an
// event, or calls the context gatherer (which may take the GIL) while holding it.

namespace c10::openreg {

namespace sim = ::openreg::sim;
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::BlockInfo;
using c10::CachingDeviceAllocator::CreateContextFn;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::SegmentInfo;
using c10::CachingDeviceAllocator::TraceEntry;

namespace {

constexpr int kMaxDevices = 64;
using Alloc = OpenRegDeviceAllocator;

// A block: a range of one segment (one sim allocation). Blocks of a segment form a doubly linked list
// in address order. Owned by the device cache; guarded by its mutex except where noted.
struct Block {
  c10::DeviceIndex device;
  sim::Stream* stream;           // allocation stream (the backend never destroys streams)
  void* ptr;
  std::size_t size;              // bytes of the block
  std::size_t requested = 0;     // bytes asked for by the current user
  bool small;                    // pool
  bool allocated = false;        // held by a DataPtr
  int pending_events = 0;        // record_stream events not yet completed
  Block* prev = nullptr;         // neighbours in the segment
  Block* next = nullptr;
  std::uint64_t free_gen = 0;    // when it was last freed (Note [Stream-ordered device memory])
  // Streams recorded with record_stream while allocated; written by recordStream under the mutex, read
  // by the freeing thread, which owns the block then (no record can race its own deleter).
  std::vector<sim::Stream*> stream_uses;
  std::shared_ptr<c10::GatheredContext> context;  // stack of the allocation, when recording

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

// Pools order blocks by stream, then size, then address: a lookup finds the best fit of one stream.
struct ByStreamSizeAddress {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return std::less<sim::Stream*>()(a->stream, b->stream);
    if (a->size != b->size) return a->size < b->size;
    return std::less<void*>()(a->ptr, b->ptr);
  }
};
using Pool = std::set<Block*, ByStreamSizeAddress>;

std::string format_size(std::uint64_t bytes) {
  char buffer[64];
  if (bytes <= 1024) {
    std::snprintf(buffer, sizeof(buffer), "%llu bytes", static_cast<unsigned long long>(bytes));
  } else if (bytes < (1ULL << 20)) {
    std::snprintf(buffer, sizeof(buffer), "%.2f KiB", static_cast<double>(bytes) / (1ULL << 10));
  } else if (bytes < (1ULL << 30)) {
    std::snprintf(buffer, sizeof(buffer), "%.2f MiB", static_cast<double>(bytes) / (1ULL << 20));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.2f GiB", static_cast<double>(bytes) / (1ULL << 30));
  }
  return buffer;
}

std::size_t round_size(std::size_t nbytes) {
  constexpr std::size_t r = Alloc::kRoundBytes;
  return nbytes < r ? r : (nbytes + r - 1) / r * r;
}

std::size_t segment_size(std::size_t size) {
  if (size <= Alloc::kSmallSize) return Alloc::kSmallBuffer;
  if (size < Alloc::kMinLargeAlloc) return Alloc::kLargeBuffer;
  constexpr std::size_t r = Alloc::kRoundLarge;
  return (size + r - 1) / r * r;
}

// Whether a free block with `remaining` bytes past the request is worth splitting off.
bool should_split(bool small, std::size_t remaining) {
  return small ? remaining >= Alloc::kRoundBytes : remaining > Alloc::kSmallSize;
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// True once `event`'s record completed. A failure before the record on its stream also completes it;
// the stream keeps reporting that failure to the program.
bool event_done(sim::Event& event) {
  try {
    return event.query();
  } catch (const sim::Error&) {
    return true;
  }
}

void wait_event(sim::Event& event) {
  try {
    event.synchronize();
  } catch (const sim::Error&) {
    // the failure stays on its stream for the program (see event_done)
  }
}

struct PendingFree {
  std::shared_ptr<sim::Event> event;  // recorded on `stream` at the free
  sim::Stream* stream;
  Block* block;
};

// History recording, shared by all devices (torch.cuda records per process too). Guarded by `mutex`;
// `enabled` is read without it on the hot path (relaxed: a stale read records or skips one entry).
struct HistoryConfig {
  std::atomic<bool> enabled{false};
  std::mutex mutex;
  CreateContextFn context = nullptr;
  std::size_t max_entries = 0;
  RecordContext when = RecordContext::NEVER;
};
HistoryConfig& history() {
  static auto* h = new HistoryConfig();  // leaked: deleters may record during static destruction
  return *h;
}

std::shared_ptr<c10::GatheredContext> gather_context(bool for_free) {
  HistoryConfig& h = history();
  if (!h.enabled.load(std::memory_order_relaxed)) return nullptr;
  CreateContextFn fn = nullptr;
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    if (h.context == nullptr) return nullptr;
    if (for_free ? h.when != RecordContext::ALL : h.when < RecordContext::STATE) return nullptr;
    fn = h.context;
  }
  return fn();  // outside every lock: it may take the GIL
}

// One device's cache. Owns every Block of the device until its segment returns to the sim.
class DeviceCache {
 public:
  DeviceCache(c10::DeviceIndex device, sim::DeviceMemory& memory) : device_(device), memory_(memory) {}

  Block* malloc(sim::Stream* stream, std::size_t nbytes) {
    const std::size_t size = round_size(nbytes);
    const bool small = size <= Alloc::kSmallSize;
    auto context = gather_context(/*for_free=*/false);
    std::unique_lock<std::mutex> lock(mutex_);
    note_stream(stream);
    process_events();
    Block* block = take_free(stream, size, small);
    if (block == nullptr) block = new_segment(stream, size, small, context);
    if (block == nullptr) {
      // Out of memory: wait for the queued work that may still use cached or pending blocks, then
      // give every cached segment back and try once more (CUDA synchronizes and frees the same way).
      stats_.num_alloc_retries += 1;
      lock.unlock();
      const std::uint64_t synced_gen = synchronize_streams();
      lock.lock();
      process_events();
      block = take_free(stream, size, small);
      if (block == nullptr) {
        release_cached(synced_gen);
        block = new_segment(stream, size, small, context);
      }
      if (block == nullptr) {
        stats_.num_ooms += 1;
        const std::string message = oom_message(nbytes);
        record(TraceEntry::OOM, free_bytes(), size, stream, nullptr);
        lock.unlock();
        TORCH_CHECK_WITH(OutOfMemoryError, false, message);
      }
    }
    return take_block(block, nbytes, size, std::move(context));
  }

  void free(Block* block) {
    auto context = gather_context(/*for_free=*/true);
    // The freeing thread owns the block's stream_uses now (nothing can record on a freed DataPtr).
    std::vector<PendingFree> pending;
    for (sim::Stream* s : block->stream_uses) {
      auto event = sim::Event::create();
      try {
        s->record(event);  // outside the mutex: with a bounded launch queue this may wait
        pending.push_back({std::move(event), s, block});
      } catch (const sim::Error&) {
        // A stream that cannot take the record has no work after this point to wait for.
      }
    }
    block->stream_uses.clear();
    std::lock_guard<std::mutex> lock(mutex_);
    block->allocated = false;
    block->free_gen = ++free_gen_;  // the free request orders it, even if its events complete later
    for_pool(block->small, [&](StatType t) {
      stats_.allocation[idx(t)].decrease(1);
      stats_.allocated_bytes[idx(t)].decrease(block->size);
    });
    record(TraceEntry::FREE_REQUESTED, reinterpret_cast<std::size_t>(block->ptr), block->size, block->stream,
           context);
    if (pending.empty()) {
      return_to_pool(block, context);
    } else {
      block->pending_events = static_cast<int>(pending.size());
      for (auto& p : pending) pending_.push_back(std::move(p));
    }
  }

  void record_stream(Block* block, sim::Stream* stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stream == block->stream) return;  // stream order covers the allocation stream
    if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) == block->stream_uses.end()) {
      block->stream_uses.push_back(stream);
    }
  }

  void empty_cache() {
    const std::uint64_t synced_gen = synchronize_streams();
    std::lock_guard<std::mutex> lock(mutex_);
    process_events();
    release_cached(synced_gen);
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_accumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (StatArray* array : stat_arrays()) {
      for (Stat& s : *array) s.reset_accumulated();
    }
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_sync_all_streams = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (StatArray* array : stat_arrays()) {
      for (Stat& s : *array) s.reset_peak();
    }
  }

  std::size_t cached_count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return small_.size() + large_.size();
  }

  void set_limit(std::uint64_t limit) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = limit;
  }

  DeviceSnapshot snapshot() {
    std::lock_guard<std::mutex> lock(mutex_);
    record(TraceEntry::SNAPSHOT, 0, 0, nullptr, nullptr);
    DeviceSnapshot out;
    for (Block* head : segments_) {
      SegmentInfo seg;
      seg.device = device_;
      seg.address = reinterpret_cast<std::size_t>(head->ptr);
      seg.stream = head->stream;
      seg.is_large = !head->small;
      for (Block* b = head; b != nullptr; b = b->next) {
        BlockInfo info;
        info.size = b->size;
        info.requested_size = b->requested;
        info.allocated = b->allocated;
        info.active = b->allocated || b->pending_events > 0;
        info.context_when_allocated = b->context;
        seg.total_size += b->size;
        if (b->allocated) {
          seg.allocated_size += b->size;
          seg.requested_size += b->requested;
        }
        if (info.active) seg.active_size += b->size;
        seg.blocks.push_back(std::move(info));
      }
      out.segments.push_back(std::move(seg));
    }
    out.trace.assign(trace_.begin(), trace_.end());
    return out;
  }

  void clear_trace() {
    std::lock_guard<std::mutex> lock(mutex_);
    trace_.clear();
  }

  sim::DeviceMemory& memory() { return memory_; }

 private:
  using StatArray = c10::CachingAllocator::StatArray;

  static constexpr std::size_t idx(StatType t) { return static_cast<std::size_t>(t); }

  template <typename Fn>
  static void for_pool(bool small, Fn&& fn) {
    fn(StatType::AGGREGATE);
    fn(small ? StatType::SMALL_POOL : StatType::LARGE_POOL);
  }

  std::array<StatArray*, 9> stat_arrays() {
    return {&stats_.allocation,      &stats_.segment,        &stats_.active,
            &stats_.inactive_split,  &stats_.allocated_bytes, &stats_.reserved_bytes,
            &stats_.active_bytes,    &stats_.inactive_split_bytes, &stats_.requested_bytes};
  }

  Pool& pool(bool small) { return small ? small_ : large_; }

  // Caller holds mutex_.
  void note_stream(sim::Stream* stream) {
    if (std::find(streams_.begin(), streams_.end(), stream) == streams_.end()) streams_.push_back(stream);
  }

  // Caller holds mutex_. Appends to the history ring when recording.
  void record(TraceEntry::Action action, std::size_t addr, std::size_t size, sim::Stream* stream,
              std::shared_ptr<c10::GatheredContext> context) {
    HistoryConfig& h = history();
    if (!h.enabled.load(std::memory_order_relaxed)) return;
    std::size_t max_entries = 0;
    {
      std::lock_guard<std::mutex> lock(h.mutex);  // order: device mutex, then history mutex
      max_entries = h.max_entries;
    }
    TraceEntry entry(action, device_, addr, size, stream, {0, 0}, 0, std::move(context));
    entry.time_.t_ = static_cast<time_t>(now_us());
    trace_.push_back(std::move(entry));
    while (trace_.size() > max_entries) trace_.pop_front();
  }

  // Caller holds mutex_. Best fit among this stream's free blocks of the pool.
  Block* take_free(sim::Stream* stream, std::size_t size, bool small) {
    Pool& p = pool(small);
    Block key{device_, stream, nullptr, size, 0, small};
    auto it = p.lower_bound(&key);
    if (it == p.end() || (*it)->stream != stream) return nullptr;
    Block* block = *it;
    p.erase(it);
    return block;
  }

  // Caller holds mutex_. A fresh segment as one free block (not in any pool), or nullptr when the sim
  // (or the memory fraction) has no room.
  Block* new_segment(sim::Stream* stream, std::size_t size, bool small,
                     const std::shared_ptr<c10::GatheredContext>& context) {
    const std::size_t bytes = segment_size(size);
    if (limit_ != 0 && static_cast<std::uint64_t>(stats_.reserved_bytes[0].current) + bytes > limit_) {
      return nullptr;
    }
    void* ptr = nullptr;
    try {
      ptr = memory_.allocate(bytes);
    } catch (const sim::OutOfMemoryError&) {
      return nullptr;
    }
    stats_.num_device_alloc += 1;
    for_pool(small, [&](StatType t) {
      stats_.segment[idx(t)].increase(1);
      stats_.reserved_bytes[idx(t)].increase(bytes);
    });
    auto* block = new Block{device_, stream, ptr, bytes, 0, small};
    segments_.insert(block);
    record(TraceEntry::SEGMENT_ALLOC, reinterpret_cast<std::size_t>(ptr), bytes, stream, context);
    return block;
  }

  // Caller holds mutex_. Splits `block` (free, out of its pool) to `size` and hands it out.
  Block* take_block(Block* block, std::size_t nbytes, std::size_t size, std::shared_ptr<c10::GatheredContext> ctx) {
    const bool already_split = block->is_split();
    const std::size_t remaining_size = block->size - size;
    if (should_split(block->small, remaining_size)) {
      auto* rest = new Block{device_, block->stream, static_cast<char*>(block->ptr) + size, remaining_size, 0,
                             block->small};
      rest->free_gen = block->free_gen;
      rest->prev = block;
      rest->next = block->next;
      if (rest->next != nullptr) rest->next->prev = rest;
      block->next = rest;
      block->size = size;
      pool(block->small).insert(rest);
      for_pool(block->small, [&](StatType t) {
        if (already_split) {
          stats_.inactive_split_bytes[idx(t)].decrease(size);  // an inactive split block shrank
        } else {
          stats_.inactive_split[idx(t)].increase(1);  // a whole segment became split
          stats_.inactive_split_bytes[idx(t)].increase(remaining_size);
        }
      });
    } else if (already_split) {
      for_pool(block->small, [&](StatType t) {
        stats_.inactive_split[idx(t)].decrease(1);
        stats_.inactive_split_bytes[idx(t)].decrease(block->size);
      });
    }
    block->allocated = true;
    block->requested = nbytes;
    block->context = std::move(ctx);
    for_pool(block->small, [&](StatType t) {
      stats_.allocation[idx(t)].increase(1);
      stats_.allocated_bytes[idx(t)].increase(block->size);
      stats_.active[idx(t)].increase(1);
      stats_.active_bytes[idx(t)].increase(block->size);
      stats_.requested_bytes[idx(t)].increase(nbytes);
    });
    record(TraceEntry::ALLOC, reinterpret_cast<std::size_t>(block->ptr), block->size, block->stream, block->context);
    return block;
  }

  // Caller holds mutex_. Merges `src` (free, in its pool) into `dst`; returns the bytes subsumed.
  std::size_t try_merge(Block* dst, Block* src) {
    if (src == nullptr || src->allocated || src->pending_events > 0) return 0;
    pool(src->small).erase(src);
    if (dst->prev == src) {  // [src dst]
      dst->ptr = src->ptr;
      dst->prev = src->prev;
      if (dst->prev != nullptr) dst->prev->next = dst;
      if (segments_.erase(src) > 0) segments_.insert(dst);  // src was the segment's head
    } else {  // [dst src]
      dst->next = src->next;
      if (dst->next != nullptr) dst->next->prev = dst;
    }
    dst->free_gen = std::max(dst->free_gen, src->free_gen);
    const std::size_t subsumed = src->size;
    dst->size += subsumed;
    delete src;
    return subsumed;
  }

  // Caller holds mutex_. A freed block whose streams are done joins its pool, merged with free
  // neighbours.
  void return_to_pool(Block* block, const std::shared_ptr<c10::GatheredContext>& context) {
    const std::size_t original_size = block->size;
    const std::size_t requested = block->requested;
    record(TraceEntry::FREE_COMPLETED, reinterpret_cast<std::size_t>(block->ptr), block->size, block->stream,
           context);
    block->requested = 0;
    block->context.reset();
    std::int64_t split_blocks = 0;
    std::int64_t split_bytes = 0;
    for (Block* neighbour : {block->prev, block->next}) {
      const std::size_t subsumed = try_merge(block, neighbour);
      if (subsumed > 0) {
        split_blocks -= 1;
        split_bytes -= static_cast<std::int64_t>(subsumed);
      }
    }
    pool(block->small).insert(block);
    if (block->is_split()) {
      split_blocks += 1;
      split_bytes += static_cast<std::int64_t>(block->size);
    }
    for_pool(block->small, [&](StatType t) {
      if (split_blocks > 0) stats_.inactive_split[idx(t)].increase(split_blocks);
      if (split_blocks < 0) stats_.inactive_split[idx(t)].decrease(-split_blocks);
      if (split_bytes > 0) stats_.inactive_split_bytes[idx(t)].increase(split_bytes);
      if (split_bytes < 0) stats_.inactive_split_bytes[idx(t)].decrease(-split_bytes);
      stats_.active[idx(t)].decrease(1);
      stats_.active_bytes[idx(t)].decrease(original_size);
      stats_.requested_bytes[idx(t)].decrease(requested);
    });
  }

  // Caller holds mutex_. Moves blocks whose record_stream events all completed into their pools.
  void process_events() {
    if (pending_.empty()) return;
    // Events of one stream complete in the order they were recorded, which is (nearly: two threads
    // may record, then append, in opposite orders) the order of pending_. So after the first one not
    // done, that stream's later ones are skipped without a query; a misordered one that is already
    // done just waits for a later allocation, never the other way round.
    std::vector<sim::Stream*> busy;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (std::find(busy.begin(), busy.end(), it->stream) != busy.end()) {
        ++it;
        continue;
      }
      if (!event_done(*it->event)) {
        busy.push_back(it->stream);
        ++it;
        continue;
      }
      Block* block = it->block;
      it = pending_.erase(it);
      if (--block->pending_events == 0) return_to_pool(block, nullptr);
    }
  }

  // Caller holds no lock. Waits until every stream that owns blocks of this device reached this point
  // and every pending record_stream event completed. Returns the free generation before the wait:
  // blocks freed up to it are used by no queued work anymore.
  std::uint64_t synchronize_streams() {
    std::vector<sim::Stream*> streams;
    std::vector<std::shared_ptr<sim::Event>> events;
    std::uint64_t gen = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.num_sync_all_streams += 1;
      streams = streams_;
      for (const auto& p : pending_) events.push_back(p.event);
      gen = free_gen_;
    }
    for (sim::Stream* s : streams) {
      auto event = sim::Event::create();
      try {
        s->record(event);
      } catch (const sim::Error&) {
        continue;
      }
      wait_event(*event);
    }
    for (const auto& e : events) wait_event(*e);
    return gen;
  }

  // Caller holds mutex_. Returns every whole (unsplit) cached segment freed up to `gen` to the sim.
  void release_cached(std::uint64_t gen) {
    for (Pool* p : {&small_, &large_}) {
      for (auto it = p->begin(); it != p->end();) {
        Block* block = *it;
        if (block->is_split() || block->free_gen > gen) {
          ++it;
          continue;
        }
        it = p->erase(it);
        memory_.free(block->ptr);
        stats_.num_device_free += 1;
        for_pool(block->small, [&](StatType t) {
          stats_.segment[idx(t)].decrease(1);
          stats_.reserved_bytes[idx(t)].decrease(block->size);
        });
        segments_.erase(block);
        record(TraceEntry::SEGMENT_FREE, reinterpret_cast<std::size_t>(block->ptr), block->size, block->stream,
               nullptr);
        delete block;
      }
    }
  }

  std::uint64_t free_bytes() const {
    const std::uint64_t capacity = memory_.capacity();
    const std::uint64_t in_use = memory_.allocated();
    return capacity > in_use ? capacity - in_use : 0;
  }

  // Caller holds mutex_.
  std::string oom_message(std::size_t nbytes) const {
    std::uint64_t pending_bytes = 0;
    std::vector<Block*> seen;
    for (const auto& p : pending_) {
      if (std::find(seen.begin(), seen.end(), p.block) == seen.end()) {
        seen.push_back(p.block);
        pending_bytes += p.block->size;
      }
    }
    const auto allocated = static_cast<std::uint64_t>(stats_.allocated_bytes[0].current);
    const auto reserved = static_cast<std::uint64_t>(stats_.reserved_bytes[0].current);
    const std::uint64_t cached = reserved - allocated - pending_bytes;
    std::string message = "openreg out of memory. Tried to allocate " + format_size(nbytes) + ". Device " +
                          std::to_string(device_) + " has a total capacity of " + format_size(memory_.capacity()) +
                          " of which " + format_size(free_bytes()) + " is free. Of the allocated memory " +
                          format_size(allocated) + " is allocated by PyTorch (live tensors), " +
                          format_size(cached) + " is reserved by PyTorch but unallocated (cached), and " +
                          format_size(pending_bytes) +
                          " is freed but still held by queued work on other streams (record_stream).";
    if (limit_ != 0) message += " The per-process memory fraction allows " + format_size(limit_) + ".";
    return message;
  }

  const c10::DeviceIndex device_;
  sim::DeviceMemory& memory_;
  std::mutex mutex_;  // guards everything below
  Pool small_;
  Pool large_;
  std::set<Block*> segments_;           // the first block of every segment
  std::vector<sim::Stream*> streams_;   // every stream that allocated here
  std::deque<PendingFree> pending_;     // record_stream events of freed blocks
  std::deque<TraceEntry> trace_;        // recorded history
  std::uint64_t free_gen_ = 0;
  std::uint64_t limit_ = 0;             // 0: no per-process fraction
  DeviceStats stats_;
};

// Caches are created on a device's first allocation and never destroyed (deleters may run during
// static destruction). Acquire/release: a reader that sees the pointer sees the constructed cache.
std::array<std::atomic<DeviceCache*>, kMaxDevices> g_caches{};
std::mutex g_caches_mutex;  // serialises creation only

DeviceCache* existing_cache(c10::DeviceIndex device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_caches[device].load(std::memory_order_acquire);
}

DeviceCache& cache(c10::DeviceIndex device) {
  if (DeviceCache* c = existing_cache(device)) return *c;
  sim::DeviceMemory& memory = sim_device(device).memory();  // checks the index, starts the device
  std::lock_guard<std::mutex> lock(g_caches_mutex);
  DeviceCache* c = g_caches[device].load(std::memory_order_relaxed);  // creation is under the mutex
  if (c == nullptr) {
    c = new DeviceCache(device, memory);
    g_caches[device].store(c, std::memory_order_release);
  }
  return *c;
}

void delete_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  existing_cache(block->device)->free(block);
}

c10::DataPtr allocate_for(c10::DeviceIndex device, sim::Stream& stream, std::size_t nbytes) {
  DeviceCache& c = cache(device);
  const c10::Device where(c10::DeviceType::PrivateUse1, device);
  if (nbytes == 0) return c10::DataPtr(nullptr, where);
  Block* block = translate_sim_errors([&] { return c.malloc(&stream, nbytes); });
  return c10::DataPtr(block->ptr, block, &delete_block, where);
}

}  // namespace

c10::DataPtr OpenRegDeviceAllocator::allocate(std::size_t nbytes) {
  const c10::DeviceIndex device = current_device();
  return allocate_for(device, current_sim_stream(device), nbytes);
}

c10::DataPtr OpenRegDeviceAllocator::allocate_on(c10::Stream stream, std::size_t nbytes) {
  return allocate_for(stream.device_index(), sim_stream(stream), nbytes);
}

void OpenRegDeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool OpenRegDeviceAllocator::initialized() {
  return true;  // caches are created lazily per device
}

void OpenRegDeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  for (c10::DeviceIndex d = 0; d < kMaxDevices; ++d) {
    if (DeviceCache* c = existing_cache(d)) translate_sim_errors([&] { c->empty_cache(); });
  }
}

void OpenRegDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr || ptr.get_deleter() != &delete_block) return;  // not ours, as on CUDA
  auto* block = static_cast<Block*>(ptr.get_context());
  sim::Stream& s = sim_stream(stream);
  existing_cache(block->device)->record_stream(block, &s);
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
  TORCH_CHECK_VALUE(fraction > 0 && fraction <= 1, "invalid fraction: ", fraction, ". Please set within (0, 1].");
  DeviceCache& c = cache(device);
  c.set_limit(static_cast<std::uint64_t>(fraction * static_cast<double>(c.memory().capacity())));
}

void OpenRegDeviceAllocator::record_history(bool enabled, CreateContextFn context, std::size_t max_entries,
                                            RecordContext when) {
  HistoryConfig& h = history();
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    h.context = enabled ? context : nullptr;
    h.max_entries = max_entries;
    h.when = when;
    h.enabled.store(enabled, std::memory_order_relaxed);  // readers tolerate a stale value
  }
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
