#pragma once
// Host memory blocks that their tensors gave back, held for reuse: the policy shared by openreg's two
// host-memory caches (Note [Recycled host destinations] in memory/HostDestinations.cpp, Note [Kernel scratch
// memory] in memory/KernelScratch.cpp). Where blocks come from, and how one is given back to the system, is
// the cache's own business: a block is an opaque pointer with a size, released through `release`.
//  - A held block serves a request of at least half its size (bounded waste).
//  - A block held unused for longer than kHoldAtMost is released at the next take or give, and at most
//    max(64 MiB, physical memory / 16) bytes are held; a block given back beyond that is released.
// Thread-safety: one mutex guards the held blocks; `release` (system calls) runs outside it.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace at::openreg {

class HeldHostBlocks {
 public:
  using Release = void (*)(void* block, std::size_t bytes) noexcept;

  explicit HeldHostBlocks(Release release) : release_(release) {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    const std::size_t physical = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * page : 0;
    limit_ = std::max<std::size_t>(std::size_t{64} << 20, physical / 16);
  }

  //! A held block of at least `bytes` (and at most twice that); nullptr when none.
  void* take(std::size_t bytes) {
    std::vector<Entry> expired;
    void* found = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      collect_expired(Clock::now(), expired);
      auto it = held_.lower_bound(bytes);
      if (it != held_.end() && it->first / 2 <= bytes) {
        found = it->second.block;
        held_bytes_ -= it->first;
        held_.erase(it);
      }
    }
    release(expired);
    return found;
  }

  //! Holds `block` (of `bytes`) for reuse, or releases it when the cache is full.
  void give(void* block, std::size_t bytes) noexcept {
    std::vector<Entry> expired;
    const auto now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      collect_expired(now, expired);
      if (held_bytes_ + bytes <= limit_) {
        held_.emplace(bytes, Held{block, now});
        held_bytes_ += bytes;
        block = nullptr;
      }
    }
    if (block != nullptr) expired.push_back({block, bytes});
    release(expired);
  }

  //! Releases every held block.
  void release_all() noexcept {
    std::vector<Entry> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [bytes, held] : held_) all.push_back({held.block, bytes});
      held_.clear();
      held_bytes_ = 0;
    }
    release(all);
  }

  std::size_t held_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_bytes_;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kHoldAtMost = std::chrono::seconds(2);

  struct Held {
    void* block;
    Clock::time_point since;
  };
  struct Entry {
    void* block;
    std::size_t bytes;
  };

  // Moves blocks held longer than kHoldAtMost to `out`. Caller holds mutex_.
  void collect_expired(Clock::time_point now, std::vector<Entry>& out) {
    for (auto it = held_.begin(); it != held_.end();) {
      if (now - it->second.since > kHoldAtMost) {
        out.push_back({it->second.block, it->first});
        held_bytes_ -= it->first;
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void release(const std::vector<Entry>& entries) noexcept {
    for (const Entry& e : entries) release_(e.block, e.bytes);
  }

  Release release_;
  std::mutex mutex_;
  std::multimap<std::size_t, Held> held_;  // size -> held block, for best fit
  std::size_t held_bytes_ = 0;
  std::size_t limit_ = 0;
};

//! The process-wide `Cache`, built on first use and never destroyed: tensors may give blocks back during
//! static destruction at exit. For the caches built on HeldHostBlocks.
template <typename Cache>
Cache& leaked_instance() {
  static auto* cache = new Cache();
  return *cache;
}

}  // namespace at::openreg
