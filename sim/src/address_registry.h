#pragma once
// AddressRegistry: the live allocations of one heap (a device's memory, or pinned host memory), by
// address, so that frees can be validated and any pointer (interior ones too) mapped to its
// allocation. Thread-safe: lookups share a lock, inserts/erases take it exclusively.

#include <cstddef>
#include <cstdint>
#include <map>
#include <shared_mutex>

namespace openreg::sim {

class AddressRegistry {
 public:
  void insert(const void* ptr, std::size_t bytes) {
    std::unique_lock lock(mutex_);
    blocks_.emplace(addr(ptr), bytes);
  }
  //! Removes the allocation starting exactly at `ptr`; returns its size, or 0 if there is none.
  std::size_t erase(const void* ptr) {
    std::unique_lock lock(mutex_);
    auto it = blocks_.find(addr(ptr));
    if (it == blocks_.end()) return 0;
    std::size_t bytes = it->second;
    blocks_.erase(it);
    return bytes;
  }
  //! The allocation containing `ptr`, as [begin, end); false if none.
  bool find(const void* ptr, std::uintptr_t* begin, std::uintptr_t* end) const {
    std::shared_lock lock(mutex_);
    auto it = blocks_.upper_bound(addr(ptr));
    if (it == blocks_.begin()) return false;
    --it;
    if (addr(ptr) >= it->first + it->second) return false;
    if (begin != nullptr) *begin = it->first;
    if (end != nullptr) *end = it->first + it->second;
    return true;
  }

 private:
  static std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
  mutable std::shared_mutex mutex_;
  std::map<std::uintptr_t, std::size_t> blocks_;  // begin -> bytes (> 0)
};

}  // namespace openreg::sim
