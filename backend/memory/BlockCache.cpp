#include "backend/memory/BlockCache.h"
#include "backend/runtime/FormatBytes.h"
#include "backend/runtime/Observer.h"

#include <c10/util/Exception.h>

#include <openreg/sim/error.h>

#include <algorithm>
#include <atomic>
#include <chrono>

namespace c10::openreg::detail {

using c10::CachingAllocator::Stat;
using c10::CachingDeviceAllocator::BlockInfo;
using c10::CachingDeviceAllocator::SegmentInfo;

namespace {

using Alloc = PoolSizes;

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

// True once `event`'s record completed, as cudaEventQuery would say: with a device profile, once the
// modelled GPU has reached it by the host's virtual time, and asking never moves the host's clock
// (Event::query_untimed; Note [Virtual time]). A failure before the record on its stream also completes
// it; the stream keeps reporting that failure to the program.
bool event_done(sim::Event& event) {
  try {
    return event.query_untimed();
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

}  // namespace

void set_history(bool enabled, CreateContextFn context, std::size_t max_entries, RecordContext when) {
  HistoryConfig& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  h.context = enabled ? context : nullptr;
  h.max_entries = max_entries;
  h.when = when;
  h.enabled.store(enabled, std::memory_order_relaxed);  // readers tolerate a stale value
}

Block* DeviceCache::malloc(sim::Stream* stream, std::size_t nbytes) {
  const std::size_t size = round_size(nbytes);
  const bool small = size <= Alloc::kSmallSize;
  auto context = gather_context(/*for_free=*/false);
  std::unique_lock<std::mutex> lock(mutex_);
  note_stream(stream);
  process_events();
  const std::uint32_t pool_index = routed_pool(stream);
  Block* block = take_free(pool_index, stream, size, small);
  if (block == nullptr) block = new_segment(pool_index, stream, size, small, context);
  if (block == nullptr) {
    // Out of memory: wait for the queued work that may still use cached or pending blocks, then
    // give every cached segment back and try once more (CUDA synchronizes and frees the same way).
    stats_.num_alloc_retries += 1;
    lock.unlock();
    const std::uint64_t synced_gen = synchronize_streams();
    lock.lock();
    process_events();
    block = take_free(pool_index, stream, size, small);
    if (block == nullptr) {
      release_cached(synced_gen);
      block = new_segment(pool_index, stream, size, small, context);
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

void DeviceCache::free(Block* block) {
  auto context = gather_context(/*for_free=*/true);
  // The freeing thread owns the block's stream_uses now (nothing can record on a freed DataPtr).
  if (RuntimeObserver* observer = runtime_observer()) {  // the race checker (Note [Sanitizer hooks])
    std::vector<std::int64_t> recorded;
    for (const sim::Stream* s : block->stream_uses) recorded.push_back(s->id());
    observer->on_block_freed(block->device, block->ptr, block->size, block->stream->id(), recorded);
  }
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
  for (auto& end : block->end_uses) pending.push_back({std::move(end), nullptr, block});
  block->end_uses.clear();
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

void DeviceCache::record_stream(Block* block, sim::Stream* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stream == block->stream) return;  // stream order covers the allocation stream
  if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) == block->stream_uses.end()) {
    block->stream_uses.push_back(stream);
  }
}

void DeviceCache::record_end(Block* block, std::shared_ptr<sim::Event> end) {
  std::lock_guard<std::mutex> lock(mutex_);
  block->end_uses.push_back(std::move(end));
}

void DeviceCache::empty_cache() {
  const std::uint64_t synced_gen = synchronize_streams();
  std::lock_guard<std::mutex> lock(mutex_);
  process_events();
  release_cached(synced_gen);
}

DeviceStats DeviceCache::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void DeviceCache::reset_accumulated() {
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

void DeviceCache::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (StatArray* array : stat_arrays()) {
    for (Stat& s : *array) s.reset_peak();
  }
}

std::size_t DeviceCache::cached_count() {
  std::lock_guard<std::mutex> lock(mutex_);
  return small_.size() + large_.size();
}

void DeviceCache::set_limit(std::uint64_t limit) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = limit;
}

DeviceSnapshot DeviceCache::snapshot() {
  std::lock_guard<std::mutex> lock(mutex_);
  record(TraceEntry::SNAPSHOT, 0, 0, nullptr, nullptr);
  DeviceSnapshot out;
  for (Block* head : segments_) {
    SegmentInfo seg;
    seg.device = device_;
    seg.address = reinterpret_cast<std::size_t>(head->ptr);
    seg.stream = head->stream;
    seg.is_large = !head->small;
    seg.owner_private_pool_id = pool_ids_[head->pool];
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

void DeviceCache::clear_trace() {
  std::lock_guard<std::mutex> lock(mutex_);
  trace_.clear();
}

std::array<DeviceCache::StatArray*, 9> DeviceCache::stat_arrays() {
  return {&stats_.allocation,      &stats_.segment,        &stats_.active,
          &stats_.inactive_split,  &stats_.allocated_bytes, &stats_.reserved_bytes,
          &stats_.active_bytes,    &stats_.inactive_split_bytes, &stats_.requested_bytes};
}

void DeviceCache::note_stream(sim::Stream* stream) {
  if (std::find(streams_.begin(), streams_.end(), stream) == streams_.end()) streams_.push_back(stream);
}

void DeviceCache::record(TraceEntry::Action action, std::size_t addr, std::size_t size, sim::Stream* stream,
                         Context context) {
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

Block* DeviceCache::take_free(std::uint32_t pool_index, sim::Stream* stream, std::size_t size, bool small) {
  Pool& p = pool(small);
  Block key(device_, stream, nullptr, size, small);
  key.pool = pool_index;
  auto it = p.lower_bound(&key);
  if (it == p.end() || (*it)->pool != pool_index || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  p.erase(it);
  return block;
}

Block* DeviceCache::new_segment(std::uint32_t pool_index, sim::Stream* stream, std::size_t size, bool small,
                                const Context& context) {
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
  auto* block = new Block(device_, stream, ptr, bytes, small);
  block->pool = pool_index;
  segments_.insert(block);
  record(TraceEntry::SEGMENT_ALLOC, reinterpret_cast<std::size_t>(ptr), bytes, stream, context);
  return block;
}

Block* DeviceCache::take_block(Block* block, std::size_t nbytes, std::size_t size, Context ctx) {
  const bool already_split = block->is_split();
  const std::size_t remaining_size = block->size - size;
  if (should_split(block->small, remaining_size)) {
    auto* rest =
        new Block(device_, block->stream, static_cast<char*>(block->ptr) + size, remaining_size, block->small);
    rest->free_gen = block->free_gen;
    rest->pool = block->pool;
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
  record(TraceEntry::ALLOC, reinterpret_cast<std::size_t>(block->ptr), block->size, block->stream,
         block->context);
  return block;
}

std::size_t DeviceCache::try_merge(Block* dst, Block* src) {
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

void DeviceCache::return_to_pool(Block* block, const Context& context) {
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

void DeviceCache::process_events() {
  if (pending_.empty()) return;
  // Events of one stream complete in the order they were recorded, which is (nearly: two threads
  // may record, then append, in opposite orders) the order of pending_. So after the first one not
  // done, that stream's later ones are skipped without a query; a misordered one that is already
  // done just waits for a later allocation, never the other way round.
  // A collective's end (no stream) is queried on its own.
  std::vector<sim::Stream*> busy;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->stream != nullptr && std::find(busy.begin(), busy.end(), it->stream) != busy.end()) {
      ++it;
      continue;
    }
    if (!event_done(*it->event)) {
      if (it->stream != nullptr) busy.push_back(it->stream);
      ++it;
      continue;
    }
    Block* block = it->block;
    it = pending_.erase(it);
    if (--block->pending_events == 0) return_to_pool(block, nullptr);
  }
}

std::uint64_t DeviceCache::synchronize_streams() {
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

void DeviceCache::release_cached(std::uint64_t gen) {
  for (Pool* p : {&small_, &large_}) {
    for (auto it = p->begin(); it != p->end();) {
      Block* block = *it;
      if (block->is_split() || block->free_gen > gen || pool_in_use(block->pool)) {
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

std::uint64_t DeviceCache::free_bytes() const {
  const std::uint64_t capacity = memory_.capacity();
  const std::uint64_t in_use = memory_.allocated();
  return capacity > in_use ? capacity - in_use : 0;
}

std::string DeviceCache::oom_message(std::size_t nbytes) const {
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
  std::string message = "openreg out of memory. Tried to allocate " + format_bytes(nbytes) + ". Device " +
                        std::to_string(device_) + " has a total capacity of " +
                        format_bytes(memory_.capacity()) +
                        " of which " + format_bytes(free_bytes()) + " is free. Of the allocated memory " +
                        format_bytes(allocated) + " is allocated by PyTorch (live tensors), " +
                        format_bytes(cached) + " is reserved by PyTorch but unallocated (cached), and " +
                        format_bytes(pending_bytes) +
                        " is freed but still held by queued work on other streams (record_stream) or collectives in flight.";
  if (limit_ != 0) message += " The per-process memory fraction allows " + format_bytes(limit_) + ".";
  return message;
}

// Note [Private memory pools]
// CUDA's caching allocator keeps private pools beside the default one: a graph's pool (its captured
// allocations, whose addresses its replays use) and torch.cuda.MemPool's. Ours follow the same rules:
//  - a pool is named by a MempoolId_t and has a use count: a graph capture or a MemPool adds a use
//    (create_or_incref_pool), a graph's reset or a MemPool's end drops it (release_pool);
//  - routes send allocations to a pool: a capture routes the allocations made for its streams, a
//    use_mem_pool context those of its thread (the filter decides, newest route first);
//  - a pool's segments are its own: a block freed into it is reused only by later allocations routed
//    to the same pool (for the same stream, as in the default pool), so nothing a graph's replays use
//    is handed to other code while the graph lives;
//  - once no one uses a pool, empty_cache returns its free segments to the device like the default
//    pool's; blocks still held by tensors return to it when they are freed and go at the next
//    empty_cache.
// Pool indices are never reused, so a block's index stays meaningful after its pool is released.

void DeviceCache::create_or_incref_pool(c10::MempoolId_t id) {
  TORCH_CHECK(id != c10::MempoolId_t(0, 0), "openreg: memory pool id (0, 0) is the default pool");
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(id);
  if (it == pools_.end()) {
    pools_.emplace(id, PrivatePool{static_cast<std::uint32_t>(pool_ids_.size()), 1});
    pool_ids_.push_back(id);
  } else {
    it->second.use_count += 1;
  }
}

void DeviceCache::begin_allocate_to_pool(c10::MempoolId_t id, std::function<bool(sim::Stream*)> filter) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(id);
  TORCH_INTERNAL_ASSERT(it != pools_.end() && it->second.use_count > 0, "allocating to a pool that is not alive");
  routes_.push_back(Route{it->second.index, id, std::move(filter)});
}

void DeviceCache::end_allocate_to_pool(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  routes_.erase(std::remove_if(routes_.begin(), routes_.end(), [&](const Route& r) { return r.id == id; }),
                routes_.end());
}

void DeviceCache::release_pool(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(id);
  if (it == pools_.end() || it->second.use_count == 0) return;
  it->second.use_count -= 1;
}

int DeviceCache::pool_use_count(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(id);
  return it == pools_.end() ? 0 : it->second.use_count;
}

bool DeviceCache::pool_in_use(std::uint32_t index) const {
  if (index == 0) return false;
  return pools_.at(pool_ids_[index]).use_count > 0;
}

std::uint32_t DeviceCache::routed_pool(sim::Stream* stream) {
  for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
    if (it->filter(stream)) return it->pool;
  }
  return 0;
}

}  // namespace c10::openreg::detail
