#include "backend/OpenRegAllocator.h"

#include "backend/OpenRegRuntime.h"

#include <c10/util/Exception.h>

#include <openreg/sim/error.h>
#include <openreg/sim/memory.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

// Note [Blocks are freed only after their work ran]
// Every work item enqueued on an openreg stream (kernels, copies, and the host callbacks that follow
// copies) holds a reference to the tensors it touches. A DataPtr's deleter therefore runs only once no
// pending work on any stream uses the block: the last reference is dropped either by the user after the
// work completed or by the work item itself as it is destroyed. So a freed block can be handed to the
// next allocation on any stream at once, without the per-stream pools and recorded events CUDA's
// allocator needs; recordStream has nothing to record. Deleters may run on device worker threads, which
// is why all allocator state is guarded by a per-device mutex and no deleter touches Python.

namespace c10::openreg {

namespace sim = ::openreg::sim;
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

namespace {

constexpr int kMaxDevices = 64;

struct Block {
  c10::DeviceIndex device;
  void* ptr;
  std::size_t size;       // bytes of the sim allocation
  std::size_t requested;  // bytes asked for by the current user (0 while cached)
  bool small;
};

struct BySizeThenAddress {
  bool operator()(const Block* a, const Block* b) const {
    return a->size != b->size ? a->size < b->size : std::less<void*>()(a->ptr, b->ptr);
  }
};

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

// One device's cache. Owns the Blocks it created (live and cached) until they are returned to the sim.
class DeviceCache {
 public:
  DeviceCache(c10::DeviceIndex device, sim::DeviceMemory& memory) : device_(device), memory_(memory) {}

  Block* malloc(std::size_t nbytes) {
    const std::size_t size = round_size(nbytes);
    const bool small = nbytes <= OpenRegDeviceAllocator::kSmallSize;
    std::lock_guard<std::mutex> lock(mutex_);
    Block* block = take_cached(size, small);
    if (block == nullptr) {
      block = new_segment(nbytes, size, small);
    }
    block->requested = nbytes;
    for_pool(small, [&](StatType t) {
      stats_.allocation[idx(t)].increase(1);
      stats_.active[idx(t)].increase(1);
      stats_.allocated_bytes[idx(t)].increase(block->size);
      stats_.active_bytes[idx(t)].increase(block->size);
      stats_.requested_bytes[idx(t)].increase(nbytes);
    });
    return block;
  }

  void free(Block* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    for_pool(block->small, [&](StatType t) {
      stats_.allocation[idx(t)].decrease(1);
      stats_.active[idx(t)].decrease(1);
      stats_.allocated_bytes[idx(t)].decrease(block->size);
      stats_.active_bytes[idx(t)].decrease(block->size);
      stats_.requested_bytes[idx(t)].decrease(block->requested);
    });
    block->requested = 0;
    if (block->small) {
      small_.insert(block);
    } else {
      large_.insert(block);
    }
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached();
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_accumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (StatArray* array : stat_arrays()) {
      for (Stat& s : *array) {
        s.reset_accumulated();
      }
    }
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (StatArray* array : stat_arrays()) {
      for (Stat& s : *array) {
        s.reset_peak();
      }
    }
  }

  std::size_t cached_count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return small_.size() + large_.size();
  }

  sim::DeviceMemory& memory() { return memory_; }

 private:
  using StatArray = c10::CachingAllocator::StatArray;
  using Pool = std::set<Block*, BySizeThenAddress>;

  // The small pool, binned by size: allocation and free are the hot path of every small op, and a
  // tree node per cached block (an allocation per free, a rebalance per take) was most of their cost.
  // A block of size s (a multiple of kRoundBytes, at most kSmallSize) lives in bin s / kRoundBytes - 1;
  // a bitmap of non-empty bins finds the best fit (the smallest cached size that fits) in a few words.
  // Within a bin blocks are reused last-freed first, whose memory is most likely still in cache.
  class SmallPool {
   public:
    void insert(Block* block) {
      const std::size_t bin = bin_of(block->size);
      bins_[bin].push_back(block);
      nonempty_[bin / 64] |= std::uint64_t{1} << (bin % 64);
      ++count_;
    }

    //! The cached block of the smallest size in [size, max_size], or nullptr.
    Block* take(std::size_t size, std::size_t max_size) {
      const std::size_t first = bin_of(size);
      const std::size_t last = std::min(bin_of(std::min(max_size, OpenRegDeviceAllocator::kSmallSize)), kBins - 1);
      for (std::size_t word = first / 64; word <= last / 64; ++word) {
        std::uint64_t bits = nonempty_[word];
        if (word == first / 64) bits &= ~std::uint64_t{0} << (first % 64);
        if (bits == 0) continue;
        const std::size_t bin = word * 64 + static_cast<std::size_t>(std::countr_zero(bits));
        if (bin > last) return nullptr;
        auto& blocks = bins_[bin];
        Block* block = blocks.back();
        blocks.pop_back();
        if (blocks.empty()) nonempty_[bin / 64] &= ~(std::uint64_t{1} << (bin % 64));
        --count_;
        return block;
      }
      return nullptr;
    }

    std::size_t size() const { return count_; }

    //! Calls fn on every cached block, then forgets them all.
    template <typename Fn>
    void drain(Fn&& fn) {
      for (auto& blocks : bins_) {
        for (Block* block : blocks) fn(block);
        blocks.clear();
      }
      nonempty_.fill(0);
      count_ = 0;
    }

   private:
    static constexpr std::size_t kBins = OpenRegDeviceAllocator::kSmallSize / OpenRegDeviceAllocator::kRoundBytes;
    static std::size_t bin_of(std::size_t size) { return size / OpenRegDeviceAllocator::kRoundBytes - 1; }

    std::array<std::vector<Block*>, kBins> bins_;
    std::array<std::uint64_t, kBins / 64> nonempty_{};
    std::size_t count_ = 0;
  };

  static constexpr std::size_t idx(StatType t) { return static_cast<std::size_t>(t); }

  static std::size_t round_size(std::size_t nbytes) {
    constexpr std::size_t r = OpenRegDeviceAllocator::kRoundBytes;
    return (nbytes + r - 1) / r * r;
  }

  template <typename Fn>
  static void for_pool(bool small, Fn&& fn) {
    fn(StatType::AGGREGATE);
    fn(small ? StatType::SMALL_POOL : StatType::LARGE_POOL);
  }

  std::array<StatArray*, 7> stat_arrays() {
    return {&stats_.allocation,      &stats_.segment,      &stats_.active,         &stats_.inactive_split,
            &stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes};
  }

  // Best fit among cached blocks of the pool, accepting bounded slack: blocks are not split, so a much
  // larger block would waste memory that another request could use.
  Block* take_cached(std::size_t size, bool small) {
    if (small) {
      return small_.take(size, 2 * size);
    }
    Block key{device_, nullptr, size, 0, small};
    auto it = large_.lower_bound(&key);
    if (it == large_.end() || (*it)->size > size + size / 4) {
      return nullptr;
    }
    Block* block = *it;
    large_.erase(it);
    return block;
  }

  Block* new_segment(std::size_t nbytes, std::size_t size, bool small) {
    void* ptr = nullptr;
    try {
      ptr = memory_.allocate(size);
    } catch (const sim::OutOfMemoryError&) {
      // Cached blocks are unused (see the Note), so they can go back to the sim right away.
      stats_.num_alloc_retries += 1;
      release_cached();
      try {
        ptr = memory_.allocate(size);
      } catch (const sim::OutOfMemoryError&) {
        stats_.num_ooms += 1;
        const std::uint64_t capacity = memory_.capacity();
        const std::uint64_t in_use = memory_.allocated();
        const auto allocated = static_cast<std::uint64_t>(stats_.allocated_bytes[0].current);
        const auto reserved = static_cast<std::uint64_t>(stats_.reserved_bytes[0].current);
        TORCH_CHECK_WITH(OutOfMemoryError, false, "openreg out of memory. Tried to allocate ",
                         format_size(nbytes), ". Device ", static_cast<int>(device_),
                         " has a total capacity of ", format_size(capacity), " of which ",
                         format_size(capacity > in_use ? capacity - in_use : 0),
                         " is free. Of the allocated memory ", format_size(allocated),
                         " is allocated by PyTorch, and ", format_size(reserved - allocated),
                         " is reserved by PyTorch but unallocated.");
      }
    }
    stats_.num_device_alloc += 1;
    for_pool(small, [&](StatType t) {
      stats_.segment[idx(t)].increase(1);
      stats_.reserved_bytes[idx(t)].increase(size);
    });
    return new Block{device_, ptr, size, 0, small};
  }

  // Caller holds mutex_.
  void release_cached() {
    auto release = [&](Block* block) {
      memory_.free(block->ptr);
      stats_.num_device_free += 1;
      for_pool(block->small, [&](StatType t) {
        stats_.segment[idx(t)].decrease(1);
        stats_.reserved_bytes[idx(t)].decrease(block->size);
      });
      delete block;
    };
    small_.drain(release);
    for (Block* block : large_) release(block);
    large_.clear();
  }

  const c10::DeviceIndex device_;
  sim::DeviceMemory& memory_;
  std::mutex mutex_;  // guards everything below
  SmallPool small_;
  Pool large_;
  DeviceStats stats_;
};

// Caches are created on a device's first allocation and never destroyed (deleters may run during
// static destruction). Acquire/release: a reader that sees the pointer sees the constructed cache.
std::array<std::atomic<DeviceCache*>, kMaxDevices> g_caches{};
std::mutex g_caches_mutex;  // serialises creation only

DeviceCache* existing_cache(c10::DeviceIndex device) {
  if (device < 0 || device >= kMaxDevices) {
    return nullptr;
  }
  return g_caches[device].load(std::memory_order_acquire);
}

DeviceCache& cache(c10::DeviceIndex device) {
  if (DeviceCache* c = existing_cache(device)) {
    return *c;
  }
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

}  // namespace

c10::DataPtr OpenRegDeviceAllocator::allocate(std::size_t nbytes) {
  const c10::DeviceIndex device = current_device();
  DeviceCache& c = cache(device);
  const c10::Device where(c10::DeviceType::PrivateUse1, device);
  if (nbytes == 0) {
    return c10::DataPtr(nullptr, where);
  }
  Block* block = translate_sim_errors([&] { return c.malloc(nbytes); });
  return c10::DataPtr(block->ptr, block, &delete_block, where);
}

void OpenRegDeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool OpenRegDeviceAllocator::initialized() {
  return true;  // caches are created lazily per device
}

void OpenRegDeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  for (c10::DeviceIndex d = 0; d < kMaxDevices; ++d) {
    if (DeviceCache* c = existing_cache(d)) {
      translate_sim_errors([&] { c->empty_cache(); });
    }
  }
}

void OpenRegDeviceAllocator::recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) {}

DeviceStats OpenRegDeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  check_device_index(device);
  DeviceCache* c = existing_cache(device);
  return c != nullptr ? c->stats() : DeviceStats();
}

void OpenRegDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  check_device_index(device);
  if (DeviceCache* c = existing_cache(device)) {
    c->reset_accumulated();
  }
}

void OpenRegDeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  check_device_index(device);
  if (DeviceCache* c = existing_cache(device)) {
    c->reset_peak();
  }
}

std::pair<std::size_t, std::size_t> OpenRegDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  sim::DeviceMemory& memory = cache(device).memory();
  const std::uint64_t total = memory.capacity();
  const std::uint64_t used = memory.allocated();
  return {static_cast<std::size_t>(total > used ? total - used : 0), static_cast<std::size_t>(total)};
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
