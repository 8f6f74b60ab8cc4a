#pragma once
// One device's block cache for the caching device allocator (memory/DeviceAllocator.h): the small and large
// pools of free blocks per stream, split and merge, the record_stream events of freed blocks, the
// out-of-memory retry, statistics and the history for snapshots. The rules are in Note
// [Stream-ordered device memory] in memory/DeviceAllocator.cpp.
//
// Thread-safety: every public member may be called from any thread; one mutex per device guards the
// cache, and no member waits for the device, records an event or gathers a stack while holding it.

#include "backend/memory/DeviceSnapshot.h"

#include <c10/core/CachingDeviceAllocator.h>

#include <openreg/sim/event.h>
#include <openreg/sim/memory.h>
#include <openreg/sim/stream.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace c10::openreg::detail {

namespace sim = ::openreg::sim;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::CreateContextFn;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::TraceEntry;

//! The pools' geometry (CUDA's caching allocator's sizes).
struct PoolSizes {
  //! Requests up to this size use the small pool.
  static constexpr std::size_t kSmallSize = 1 << 20;
  //! Every block size is a multiple of this (and at least this).
  static constexpr std::size_t kRoundBytes = 512;
  //! Size of a small-pool segment.
  static constexpr std::size_t kSmallBuffer = 2 << 20;
  //! Size of a large-pool segment for requests under kMinLargeAlloc.
  static constexpr std::size_t kLargeBuffer = 20 << 20;
  //! Requests from this size up get a segment of their own, rounded to kRoundLarge.
  static constexpr std::size_t kMinLargeAlloc = 10 << 20;
  static constexpr std::size_t kRoundLarge = 2 << 20;
};

// A block: a range of one segment (one sim allocation). Blocks of a segment form a doubly linked list
// in address order. Owned by the device cache; guarded by its mutex except where noted.
struct Block {
  Block(c10::DeviceIndex device_, sim::Stream* stream_, void* ptr_, std::size_t size_, bool small_)
      : device(device_), stream(stream_), ptr(ptr_), size(size_), small(small_) {}

  c10::DeviceIndex device;
  sim::Stream* stream;           // allocation stream (the backend never destroys streams)
  void* ptr;
  std::size_t size;              // bytes of the block
  std::size_t requested = 0;     // bytes asked for by the current user
  bool small;                    // small or large pool
  std::uint32_t pool = 0;        // memory pool: 0 the default, else a private one (Note [Private memory pools])
  bool allocated = false;        // held by a DataPtr
  int pending_events = 0;        // record_stream events not yet completed
  Block* prev = nullptr;         // neighbours in the segment
  Block* next = nullptr;
  std::uint64_t free_gen = 0;    // when it was last freed (Note [Stream-ordered device memory])
  // Streams recorded with record_stream while allocated; written by recordStream under the mutex, read
  // by the freeing thread, which owns the block then (no record can race its own deleter).
  std::vector<sim::Stream*> stream_uses;
  // Collectives in flight on the block (DeviceAllocator::hold_until): at its free, it waits for their
  // ends as for a recorded stream's event. Same ownership as stream_uses.
  std::vector<std::shared_ptr<sim::Event>> end_uses;
  std::shared_ptr<c10::GatheredContext> context;  // stack of the allocation, when recording

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

// Pools order blocks by memory pool, stream, size, then address: a lookup finds the best fit of one
// stream within one memory pool.
struct ByStreamSizeAddress {
  bool operator()(const Block* a, const Block* b) const {
    if (a->pool != b->pool) return a->pool < b->pool;
    if (a->stream != b->stream) return std::less<sim::Stream*>()(a->stream, b->stream);
    if (a->size != b->size) return a->size < b->size;
    return std::less<void*>()(a->ptr, b->ptr);
  }
};
using Pool = std::set<Block*, ByStreamSizeAddress>;

struct PendingFree {
  std::shared_ptr<sim::Event> event;  // recorded on `stream` at the free, or a collective's end
  sim::Stream* stream;                // null for a collective's end (completes out of any stream's order)
  Block* block;
};

//! Starts or stops history recording for every device (see OpenRegDeviceAllocator::record_history).
void set_history(bool enabled, CreateContextFn context, std::size_t max_entries, RecordContext when);

// One device's cache. Owns every Block of the device until its segment returns to the sim.
class DeviceCache {
 public:
  DeviceCache(c10::DeviceIndex device, sim::DeviceMemory& memory) : device_(device), memory_(memory) {}

  //! A block of at least `nbytes` (> 0) for `stream`, from the memory pool the allocation is routed
  //! to (Note [Private memory pools]); waits for queued work and releases the cache before it throws
  //! c10::OutOfMemoryError.
  Block* malloc(sim::Stream* stream, std::size_t nbytes);

  // Private memory pools (Note [Private memory pools] in memory/BlockCache.cpp).
  //! Creates the pool `id` (use count 1) or adds a use to it.
  void create_or_incref_pool(c10::MempoolId_t id);
  //! Routes allocations for which `filter(stream)` holds (called with the cache's mutex held, on the
  //! allocating thread) to pool `id`, which must exist, until end_allocate_to_pool(id).
  void begin_allocate_to_pool(c10::MempoolId_t id, std::function<bool(sim::Stream*)> filter);
  //! Stops every routing to pool `id`.
  void end_allocate_to_pool(c10::MempoolId_t id);
  //! Drops a use of pool `id`; at zero its cached segments become releasable by empty_cache.
  void release_pool(c10::MempoolId_t id);
  //! The pool's use count (0 when it does not exist).
  int pool_use_count(c10::MempoolId_t id);
  //! Returns a block: to its stream's pool at once, or after the events of its recorded streams.
  void free(Block* block);
  //! Marks an allocated block as used on `stream` (Tensor.record_stream).
  void record_stream(Block* block, sim::Stream* stream);
  //! Marks an allocated block as used until `end` completes (a collective in flight).
  void record_end(Block* block, std::shared_ptr<sim::Event> end);
  //! Waits for the work that may use cached blocks, then returns unsplit cached segments to the sim.
  void empty_cache();
  DeviceStats stats();       //!< a copy of the statistics
  void reset_accumulated();  //!< zeroes the "allocated"/"freed" counters and the num_* counts
  void reset_peak();         //!< peaks = current values
  std::size_t cached_count();  //!< free blocks in the pools
  //! Caps reserved bytes (0: no cap) for set_per_process_memory_fraction.
  void set_limit(std::uint64_t limit);
  //! Segments with their blocks, and the recorded history.
  DeviceSnapshot snapshot();
  void clear_trace();  //!< forgets the recorded history
  sim::DeviceMemory& memory() { return memory_; }

 private:
  using StatArray = c10::CachingAllocator::StatArray;
  using Context = std::shared_ptr<c10::GatheredContext>;

  static constexpr std::size_t idx(StatType t) { return static_cast<std::size_t>(t); }
  template <typename Fn>
  static void for_pool(bool small, Fn&& fn) {
    fn(StatType::AGGREGATE);
    fn(small ? StatType::SMALL_POOL : StatType::LARGE_POOL);
  }
  std::array<StatArray*, 9> stat_arrays();
  Pool& pool(bool small) { return small ? small_ : large_; }

  // Every private member below except synchronize_streams is called with mutex_ held.
  void note_stream(sim::Stream* stream);
  //! Appends to the history ring when recording.
  void record(TraceEntry::Action action, std::size_t addr, std::size_t size, sim::Stream* stream,
              Context context);
  //! Best fit among this stream's free blocks of the pool, taken out of it; nullptr if none.
  Block* take_free(std::uint32_t pool, sim::Stream* stream, std::size_t size, bool small);
  //! Whether private pool `index` still has users (its cached segments stay reserved for it).
  bool pool_in_use(std::uint32_t index) const;
  //! The pool the allocation of the calling thread on `stream` goes to (0: the default pool).
  std::uint32_t routed_pool(sim::Stream* stream);
  //! A fresh segment as one free block (in no pool), or nullptr when the sim (or the memory fraction)
  //! has no room.
  Block* new_segment(std::uint32_t pool, sim::Stream* stream, std::size_t size, bool small,
                     const Context& context);
  //! Splits `block` (free, out of its pool) to `size` and hands it out.
  Block* take_block(Block* block, std::size_t nbytes, std::size_t size, Context ctx);
  //! Merges `src` (if free and in its pool) into `dst`; returns the bytes subsumed.
  std::size_t try_merge(Block* dst, Block* src);
  //! A freed block whose streams are done joins its pool, merged with free neighbours.
  void return_to_pool(Block* block, const Context& context);
  //! Moves blocks whose record_stream events all completed into their pools.
  void process_events();
  //! Called with no lock held. Waits until every stream that allocated here reached this point and
  //! every pending record_stream event completed. Returns the free generation before the wait:
  //! blocks freed up to it are used by no queued work anymore.
  std::uint64_t synchronize_streams();
  //! Returns every whole (unsplit) cached segment freed up to `gen` to the sim.
  void release_cached(std::uint64_t gen);
  std::uint64_t free_bytes() const;  //!< free bytes of the device as the sim accounts them
  std::string oom_message(std::size_t nbytes) const;

  const c10::DeviceIndex device_;
  sim::DeviceMemory& memory_;
  std::mutex mutex_;  // guards everything below
  Pool small_;
  Pool large_;
  std::set<Block*> segments_;          // the first block of every segment
  std::vector<sim::Stream*> streams_;  // every stream that allocated here
  std::deque<PendingFree> pending_;    // record_stream events of freed blocks
  std::deque<TraceEntry> trace_;       // recorded history
  std::uint64_t free_gen_ = 0;         // counts frees (Note [Stream-ordered device memory])
  std::uint64_t limit_ = 0;            // 0: no per-process fraction
  DeviceStats stats_;
  struct PrivatePool {
    std::uint32_t index;
    int use_count;
  };
  struct Route {
    std::uint32_t pool;
    c10::MempoolId_t id;
    std::function<bool(sim::Stream*)> filter;
  };
  std::map<c10::MempoolId_t, PrivatePool> pools_;  // live and released private pools
  std::vector<c10::MempoolId_t> pool_ids_{{0, 0}};  // by index
  std::vector<Route> routes_;                       // newest last
};

}  // namespace c10::openreg::detail
