#include "openreg/sim/memory.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

#include <sys/mman.h>

#include "address_registry.h"
#include "internal_check.h"

namespace openreg::sim {

struct DeviceMemory::State {
  int device = 0;
  std::uint64_t capacity = 0;
  std::mutex mutex;  // serializes the capacity check with the accounting; guards `valued`
  // Atomics so the noexcept getters can read without the lock; written under `mutex`.
  std::atomic<std::uint64_t> allocated{0};
  std::atomic<std::uint64_t> peak{0};
  std::atomic<std::uint64_t> count{0};
  AddressRegistry blocks;
  bool backed = true;  // immutable
  // Unbacked memory only: the byte ranges that hold values, as disjoint, non-adjacent [begin, end)
  // intervals keyed by begin (Note [Values in timing-only execution] in stream.cpp). Guarded by `mutex`.
  std::map<std::uintptr_t, std::uintptr_t> valued;
};

namespace {
// Whether [begin, end) lies inside one interval of `set` (adjacent intervals are merged, so a range
// that holds values throughout is inside one).
bool covers(const std::map<std::uintptr_t, std::uintptr_t>& set, std::uintptr_t begin, std::uintptr_t end) {
  if (begin >= end) return true;
  auto it = set.upper_bound(begin);
  if (it == set.begin()) return false;
  --it;
  return it->second >= end;
}

// Makes [begin, end) part of `set` (`on`) or not, keeping the intervals disjoint and merged.
void assign(std::map<std::uintptr_t, std::uintptr_t>& set, std::uintptr_t begin, std::uintptr_t end, bool on) {
  if (begin >= end) return;
  // Cut [begin, end) out of the interval that starts before it, keeping its head and its tail.
  auto it = set.upper_bound(begin);
  if (it != set.begin()) {
    auto before = std::prev(it);
    if (before->second > begin) {
      const std::uintptr_t tail = before->second;
      if (before->first == begin) {
        set.erase(before);
      } else {
        before->second = begin;
      }
      if (tail > end) set.emplace(end, tail);
    }
  }
  // Drop the intervals that start inside it, keeping the tail of the last.
  it = set.lower_bound(begin);
  while (it != set.end() && it->first < end) {
    const std::uintptr_t tail = it->second;
    it = set.erase(it);
    if (tail > end) {
      set.emplace(end, tail);
      break;
    }
  }
  if (!on) return;
  std::uintptr_t first = begin, last = end;
  auto next = set.lower_bound(end);
  if (next != set.end() && next->first == end) {
    last = next->second;
    next = set.erase(next);
  }
  if (next != set.begin()) {
    auto before = std::prev(next);
    if (before->second == begin) {
      first = before->first;
      set.erase(before);
    }
  }
  set.emplace(first, last);
}
}  // namespace

DeviceMemory::DeviceMemory(int device, std::uint64_t capacity, bool backed) : s_(std::make_unique<State>()) {
  s_->device = device;
  s_->capacity = capacity;
  s_->backed = backed;
}

namespace {
// Unbacked memory (timing-only execution): address space reserved without committing swap or pages
// (MAP_NORESERVE); untouched pages read as zeros and cost nothing.
void* map_unbacked(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
}  // namespace

DeviceMemory::~DeviceMemory() = default;  // leaked blocks stay leaked: they may still be in use

void* DeviceMemory::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  State& s = *s_;
  std::lock_guard lock(s.mutex);
  const std::uint64_t in_use = s.allocated.load(std::memory_order_relaxed);
  if (bytes > s.capacity || in_use > s.capacity - bytes) throw OutOfMemoryError(s.device, bytes, in_use, s.capacity);
  if (bytes > SIZE_MAX - kAlignment) throw OutOfMemoryError(s.device, bytes, in_use, s.capacity);
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;  // aligned_alloc's rule
  void* p = s.backed ? std::aligned_alloc(kAlignment, rounded) : map_unbacked(rounded);
  if (p == nullptr) throw OutOfMemoryError(s.device, bytes, in_use, s.capacity);  // the host ran out first
  s.blocks.insert(p, bytes);
  // relaxed: the mutex orders writers; readers want a recent value, not a synchronization point.
  const std::uint64_t now = in_use + bytes;
  s.allocated.store(now, std::memory_order_relaxed);
  s.peak.store(std::max(s.peak.load(std::memory_order_relaxed), now), std::memory_order_relaxed);
  s.count.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void DeviceMemory::free(void* ptr) {
  if (ptr == nullptr) return;
  State& s = *s_;
  std::lock_guard lock(s.mutex);
  const std::size_t bytes = s.blocks.erase(ptr);
  if (bytes == 0) {
    const bool interior = s.blocks.find(ptr, nullptr, nullptr);
    throw_error(Errc::kInvalidPointer,
                "free of " + pointer_text(ptr) + " on openreg:" + std::to_string(s.device) + ": " +
                    (interior ? "it points inside an allocation, not at its start"
                              : "not a live allocation of this device (foreign pointer or double free)"));
  }
  s.allocated.store(s.allocated.load(std::memory_order_relaxed) - bytes, std::memory_order_relaxed);
  s.count.fetch_sub(1, std::memory_order_relaxed);
  if (!s.backed) {
    const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
    assign(s.valued, begin, begin + bytes, false);  // the address may come back for another allocation
  }
  if (s.backed) {
    std::free(ptr);
  } else {
    ::munmap(ptr, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  }
}

bool DeviceMemory::find(const void* ptr, std::uintptr_t* begin, std::uintptr_t* end) const {
  return s_->blocks.find(ptr, begin, end);
}

bool DeviceMemory::holds_values(const void* ptr, std::size_t bytes) const {
  if (s_->backed) return true;
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(s_->mutex);
  return covers(s_->valued, begin, begin + bytes);
}

void DeviceMemory::set_holds_values(const void* ptr, std::size_t bytes, bool holds) {
  if (s_->backed) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(s_->mutex);
  assign(s_->valued, begin, begin + bytes, holds);
}

std::uint64_t DeviceMemory::allocated() const noexcept { return s_->allocated.load(std::memory_order_relaxed); }
std::uint64_t DeviceMemory::peak() const noexcept { return s_->peak.load(std::memory_order_relaxed); }
std::uint64_t DeviceMemory::capacity() const noexcept { return s_->capacity; }
std::uint64_t DeviceMemory::allocation_count() const noexcept { return s_->count.load(std::memory_order_relaxed); }

void DeviceMemory::reset_peak() noexcept {
  std::lock_guard lock(s_->mutex);
  s_->peak.store(s_->allocated.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace openreg::sim
