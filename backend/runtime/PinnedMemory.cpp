#include "backend/runtime/PinnedMemory.h"

#include "backend/runtime/Device.h"
#include "backend/runtime/SimErrors.h"

#include <openreg/sim/runtime.h>

namespace c10::openreg {

namespace sim = ::openreg::sim;

void* alloc_pinned(std::size_t bytes) {
  return translate_sim_errors([&] { return detail::started_runtime().host_alloc_pinned(bytes); });
}

void free_pinned(void* ptr) {
  // Not started_runtime(): a pinned block outlives a fork, and the runtime it came from exists (it is
  // leaked).
  translate_sim_errors([&] { sim::Runtime::global().host_free_pinned(ptr); });
}

bool is_pinned(const void* ptr) {
  return translate_sim_errors([&] { return sim::Runtime::global().is_pinned(ptr); });
}

}  // namespace c10::openreg
