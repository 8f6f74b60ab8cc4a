#include "backend/memory/HostAllocator.h"

#include "backend/runtime/Fork.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/PinnedMemory.h"
#include "backend/runtime/Observer.h"

#include <c10/util/Exception.h>

#include <array>
#include <cstring>
#include <exception>
#include <mutex>
#include <unordered_map>

namespace c10::openreg {

namespace {

// The byte statistics. Leaked, like every object device threads touch: the deleter runs on the thread
// that drops a pinned storage's last reference, a device thread included (work items keep the pinned
// memory they copy alive, ops/Copy.cpp), and may run during static destruction (Note [Teardown at
// exit] in sim/src/runtime.cpp).
struct HostStatsState {
  std::mutex mutex;  // guards the members below
  at::HostStats stats;
  std::unordered_map<const void*, std::size_t> sizes;  // live allocation -> bytes, for the byte stats
};
HostStatsState& host_stats() {
  static auto* state = new HostStatsState();
  return *state;
}

// The DataPtr deleter: it runs from destructors (noexcept), so a failure is a warning, never an
// exception. The runtime refuses a pointer that is not a live pinned allocation: a DataPtr built with
// this deleter around foreign memory, or a double free; that memory is left alone.
void free_pinned_deleter(void* ptr) noexcept {
  if (ptr == nullptr) {
    return;
  }
  try {
    std::size_t freed = 0;
    {
      HostStatsState& state = host_stats();
      std::lock_guard<std::mutex> lock(state.mutex);
      auto it = state.sizes.find(ptr);
      if (it != state.sizes.end()) {
        state.stats.active_requests.decrease(1);
        state.stats.allocations.decrease(1);
        state.stats.active_bytes.decrease(it->second);
        state.stats.allocated_bytes.decrease(it->second);
        state.stats.num_host_free += 1;
        freed = it->second;
        state.sizes.erase(it);
      }
    }
    // Before the bytes can be handed out again; outside the statistics' lock (the checker takes its own).
    if (freed > 0) {
      // The copies that used it ran; the race checker hears of it (Note [Sanitizer hooks]).
      if (RuntimeObserver* observer = runtime_observer()) observer->on_pinned_freed(ptr, freed);
    }
    free_pinned(ptr);
  } catch (const std::exception& e) {
    try {
      TORCH_WARN("openreg: the pinned host memory at ", ptr, " was not freed: ",
                 c10::GetExceptionString(e));
    } catch (...) {
      // A warning handler that throws (warnings as errors) has nowhere to go from a destructor.
    }
  }
}

}  // namespace

at::DataPtr OpenRegHostAllocator::allocate(std::size_t nbytes) {
  init();  // pinned memory belongs to the runtime: start it (and refuse in a bad fork)
  void* ptr = alloc_pinned(nbytes);
  if (ptr != nullptr) {
    HostStatsState& state = host_stats();
    std::lock_guard<std::mutex> lock(state.mutex);
    state.sizes.emplace(ptr, nbytes);
    state.stats.allocations.increase(1);
    state.stats.active_requests.increase(1);
    state.stats.allocated_bytes.increase(nbytes);
    state.stats.active_bytes.increase(nbytes);
    state.stats.num_host_alloc += 1;
  }
  return at::DataPtr(ptr, ptr, &free_pinned_deleter, c10::Device(c10::DeviceType::CPU));
}

c10::DeleterFnPtr OpenRegHostAllocator::raw_deleter() const {
  return &free_pinned_deleter;
}

void OpenRegHostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool OpenRegHostAllocator::record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) {
  return true;
}

void OpenRegHostAllocator::empty_cache() {}

at::HostStats OpenRegHostAllocator::get_stats() {
  HostStatsState& state = host_stats();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.stats;
}

namespace {
// The statistics that reset_accumulated_stats and reset_peak_stats reset (as CUDA's host allocator's).
std::array<at::Stat*, 4> resettable_stats(at::HostStats& stats) {
  return {&stats.allocations, &stats.active_requests, &stats.allocated_bytes, &stats.active_bytes};
}
}  // namespace

void OpenRegHostAllocator::reset_accumulated_stats() {
  HostStatsState& state = host_stats();
  std::lock_guard<std::mutex> lock(state.mutex);
  for (at::Stat* stat : resettable_stats(state.stats)) stat->reset_accumulated();
  state.stats.num_host_alloc = 0;
  state.stats.num_host_free = 0;
}

void OpenRegHostAllocator::reset_peak_stats() {
  HostStatsState& state = host_stats();
  std::lock_guard<std::mutex> lock(state.mutex);
  for (at::Stat* stat : resettable_stats(state.stats)) stat->reset_peak();
}

OpenRegHostAllocator& host_allocator() {
  static auto* instance = new OpenRegHostAllocator();
  return *instance;
}

bool is_pinned_ptr(const void* ptr) noexcept {
  if (ptr == nullptr || !is_runtime_initialized()) {
    return false;  // nothing can be pinned before the runtime starts (or in a forked child)
  }
  try {
    return is_pinned(ptr);
  } catch (...) {
    return false;
  }
}

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &host_allocator());

}  // namespace c10::openreg
