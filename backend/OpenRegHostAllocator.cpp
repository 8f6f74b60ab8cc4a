#include "backend/OpenRegHostAllocator.h"

#include "backend/OpenRegFork.h"
#include "backend/OpenRegRuntime.h"

#include <openreg/sim/runtime.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

namespace c10::openreg {

namespace sim = ::openreg::sim;

namespace {

std::mutex g_stats_mutex;  // guards g_stats and g_sizes
at::HostStats g_stats;
std::unordered_map<const void*, std::size_t> g_sizes;  // live allocation -> bytes, for the byte stats

void free_pinned(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(g_stats_mutex);
    auto it = g_sizes.find(ptr);
    if (it != g_sizes.end()) {
      g_stats.active_requests.decrease(1);
      g_stats.allocations.decrease(1);
      g_stats.active_bytes.decrease(it->second);
      g_stats.allocated_bytes.decrease(it->second);
      g_stats.num_host_free += 1;
      g_sizes.erase(it);
    }
  }
  translate_sim_errors([&] { sim::Runtime::global().host_free_pinned(ptr); });
}

}  // namespace

at::DataPtr OpenRegHostAllocator::allocate(std::size_t nbytes) {
  init();  // pinned memory belongs to the runtime: start it (and refuse in a bad fork)
  void* ptr = nbytes == 0 ? nullptr
                          : translate_sim_errors([&] { return sim::Runtime::global().host_alloc_pinned(nbytes); });
  if (ptr != nullptr) {
    std::lock_guard<std::mutex> lock(g_stats_mutex);
    g_sizes.emplace(ptr, nbytes);
    g_stats.allocations.increase(1);
    g_stats.active_requests.increase(1);
    g_stats.allocated_bytes.increase(nbytes);
    g_stats.active_bytes.increase(nbytes);
    g_stats.num_host_alloc += 1;
  }
  return at::DataPtr(ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU));
}

c10::DeleterFnPtr OpenRegHostAllocator::raw_deleter() const {
  return &free_pinned;
}

void OpenRegHostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool OpenRegHostAllocator::record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) {
  return true;
}

void OpenRegHostAllocator::empty_cache() {}

at::HostStats OpenRegHostAllocator::get_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  return g_stats;
}

void OpenRegHostAllocator::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  for (at::Stat* stat : {&g_stats.allocations, &g_stats.active_requests, &g_stats.allocated_bytes,
                         &g_stats.active_bytes}) {
    stat->reset_accumulated();
  }
  g_stats.num_host_alloc = 0;
  g_stats.num_host_free = 0;
}

void OpenRegHostAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  for (at::Stat* stat : {&g_stats.allocations, &g_stats.active_requests, &g_stats.allocated_bytes,
                         &g_stats.active_bytes}) {
    stat->reset_peak();
  }
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
    return sim::Runtime::global().is_pinned(ptr);
  } catch (...) {
    return false;
  }
}

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &host_allocator());

}  // namespace c10::openreg
