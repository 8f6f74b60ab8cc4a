#include "openreg/sim/error.h"

#include <cstdio>
#include <string>

#include "internal_check.h"

namespace openreg::sim {

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f %s", value, kUnits[unit]);
  return buf;
}

namespace {
std::string oom_message(int device, std::uint64_t requested, std::uint64_t in_use, std::uint64_t capacity) {
  std::uint64_t free = capacity > in_use ? capacity - in_use : 0;
  return "openreg:" + std::to_string(device) + " out of memory: tried to allocate " + format_bytes(requested) +
         "; " + format_bytes(in_use) + " in use of " + format_bytes(capacity) + " capacity, " +
         format_bytes(free) + " free";
}
}  // namespace

OutOfMemoryError::OutOfMemoryError(int device, std::uint64_t requested, std::uint64_t in_use,
                                   std::uint64_t capacity)
    : Error(Errc::kOutOfMemory, oom_message(device, requested, in_use, capacity)),
      device_(device),
      requested_(requested),
      in_use_(in_use),
      capacity_(capacity) {}

}  // namespace openreg::sim
