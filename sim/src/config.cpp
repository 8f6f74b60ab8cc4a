#include "openreg/sim/config.h"
#include "openreg/sim/profile.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <thread>

#include "openreg/sim/error.h"

namespace openreg::sim {
namespace {

constexpr const char* kDeviceCountVar = "OPENREG_DEVICE_COUNT";
constexpr const char* kComputeThreadsVar = "OPENREG_COMPUTE_THREADS";
constexpr const char* kMemoryCapacityVar = "OPENREG_MEMORY_CAPACITY";
constexpr const char* kCopyBandwidthVar = "OPENREG_COPY_BANDWIDTH";
constexpr const char* kLaunchQueueDepthVar = "OPENREG_LAUNCH_QUEUE_DEPTH";
constexpr const char* kScheduleFuzzVar = "OPENREG_SCHEDULE_FUZZ";
constexpr const char* kSanitizerVar = "OPENREG_SANITIZER";
constexpr const char* kDeviceProfileVar = "OPENREG_DEVICE_PROFILE";
constexpr const char* kHostTimeVar = "OPENREG_HOST_TIME";
constexpr const char* kExecuteVar = "OPENREG_EXECUTE";
constexpr long long kMaxFuzzSeed = 999'999'999'999'999'999LL;  // parse_int's 18 digits
constexpr int kMaxComputeThreads = 1024;

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

[[noreturn]] void bad_value(std::string_view variable, std::string_view value, std::string_view accepted) {
  std::string var(variable);
  throw ConfigError(var, var + "='" + std::string(value) + "' is invalid: expected " + std::string(accepted));
}

// A whole number in [lo, hi] (decimal digits only).
long long parse_int(std::string_view text, std::string_view variable, long long lo, long long hi) {
  std::string accepted = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  std::string_view t = trim(text);
  if (t.empty() || t.size() > 18 ||
      !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    bad_value(variable, text, accepted);
  }
  long long v = std::stoll(std::string(t));
  if (v < lo || v > hi) bad_value(variable, text, accepted);
  return v;
}

// The variable's value, or nullopt when unset or empty ("VAR= program" means "use the default").
std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

std::uint64_t physical_memory() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t{8} << 30;  // unknown: assume 8 GiB
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

}  // namespace

namespace {
// parse_byte_size's work; `whole` (if given) tells whether the written value was a whole number of
// bytes before rounding.
std::uint64_t parse_size(std::string_view text, std::string_view variable, bool* whole) {
  static constexpr const char* kAccepted =
      "a byte size: a non-negative number with an optional K, M, G or T suffix (powers of 1024), "
      "optionally followed by B or iB, e.g. 1048576, 512K, 64MiB, 1.5G, 2GB";
  std::string_view t = trim(text);
  std::size_t i = 0;
  while (i < t.size() && ((t[i] >= '0' && t[i] <= '9') || t[i] == '.')) ++i;
  std::string_view number = t.substr(0, i);
  std::string_view suffix = trim(t.substr(i));
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1 || number.front() == '.' ||
      number.back() == '.') {
    bad_value(variable, text, kAccepted);
  }
  int shift = 0;
  if (!suffix.empty()) {
    switch (std::toupper(static_cast<unsigned char>(suffix.front()))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: shift = -1; break;
    }
    std::string_view rest = shift > 0 ? suffix.substr(1) : suffix;
    if (shift < 0) shift = 0;
    if (!(rest.empty() || iequals(rest, "B") || (shift > 0 && iequals(rest, "iB")))) {
      bad_value(variable, text, kAccepted);
    }
  }
  // Fractions are rounded to whole bytes ("1.5K" = 1536).
  const long double exact = std::strtold(std::string(number).c_str(), nullptr) * std::ldexp(1.0L, shift);
  long double value = std::roundl(exact);
  if (whole != nullptr) *whole = value == exact;
  if (!(value < std::ldexp(1.0L, 64))) bad_value(variable, text, "a byte size below 16 EiB");
  return static_cast<std::uint64_t>(value);
}
}  // namespace

std::uint64_t parse_byte_size(std::string_view text, std::string_view variable) {
  return parse_size(text, variable, nullptr);
}

namespace {
// A rate the copy engines can honour: "0" means unlimited (documented); anything else must be a whole
// number of bytes/s, at least 1, below 16 EiB/s. "0.4" used to round to 0 = unlimited, the opposite of
// what was asked; it is refused rather than silently reinterpreted.
std::uint64_t parse_copy_bandwidth(std::string_view number, std::string_view original) {
  static constexpr const char* kAccepted =
      "a byte size per second that is a whole number of bytes, below 16 EiB (e.g. 1G, 1.5G, 500M/s, 1048576), "
      "or 0 / unlimited for no limit";
  bool whole = false;
  std::uint64_t v = 0;
  try {
    v = parse_size(number, kCopyBandwidthVar, &whole);
  } catch (const ConfigError&) {
    bad_value(kCopyBandwidthVar, original, kAccepted);
  }
  if (!whole) bad_value(kCopyBandwidthVar, original, kAccepted);
  return v;
}
}  // namespace

Config Config::from_env() {
  Config c;
  if (auto v = env(kDeviceCountVar)) c.device_count = static_cast<int>(parse_int(*v, kDeviceCountVar, 1, kMaxDevices));
  if (auto v = env(kComputeThreadsVar)) {
    c.compute_threads = static_cast<int>(parse_int(*v, kComputeThreadsVar, 1, kMaxComputeThreads));
  }
  if (auto v = env(kMemoryCapacityVar)) {
    c.memory_capacity = parse_byte_size(*v, kMemoryCapacityVar);
    if (c.memory_capacity == 0) bad_value(kMemoryCapacityVar, *v, "a byte size greater than 0");
  }
  if (auto v = env(kCopyBandwidthVar)) {
    std::string_view t = trim(*v);
    if (iequals(t, "unlimited")) {
      c.copy_bandwidth = kUnlimitedBandwidth;
    } else {
      // A rate may be written "1G" or "1GB/s".
      if (t.size() > 2 && iequals(t.substr(t.size() - 2), "/s")) t.remove_suffix(2);
      c.copy_bandwidth = parse_copy_bandwidth(t, *v);
    }
  }
  if (auto v = env(kLaunchQueueDepthVar)) {
    c.launch_queue_depth = static_cast<std::uint64_t>(
        parse_int(*v, kLaunchQueueDepthVar, kMinLaunchQueueDepth, kMaxLaunchQueueDepth));
  }
  if (auto v = env(kScheduleFuzzVar)) {
    c.schedule_fuzz_seed = static_cast<std::uint64_t>(parse_int(*v, kScheduleFuzzVar, 0, kMaxFuzzSeed));
  }
  if (auto v = env(kSanitizerVar)) {
    // Trimmed and case-insensitive, as every other variable's words are ("unlimited").
    const std::string_view t = trim(*v);
    if (t == "0") {
      c.race_check = RaceCheckMode::kOff;
    } else if (t == "1") {
      c.race_check = RaceCheckMode::kRaise;
    } else if (iequals(t, "report")) {
      c.race_check = RaceCheckMode::kReport;
    } else {
      bad_value(kSanitizerVar, *v, "0 (off), 1 (raise at the op that completes a race) or report (record every race "
                                   "and report them at exit)");
    }
  }
  if (auto v = env(kDeviceProfileVar)) c.device_profile = load_device_profile(trim(*v), kDeviceProfileVar);
  if (auto v = env(kHostTimeVar)) {
    const std::string_view t = trim(*v);
    if (iequals(t, "modelled") || iequals(t, "modeled")) {
      c.host_time = HostTimeMode::kModelled;
    } else if (iequals(t, "measured")) {
      c.host_time = HostTimeMode::kMeasured;
    } else {
      bad_value(kHostTimeVar, *v, "modelled (the profile's fixed host cost per op) or measured (the thread's CPU time)");
    }
  }
  if (auto v = env(kExecuteVar)) {
    const std::string_view t = trim(*v);
    if (iequals(t, "compute")) {
      c.execute = ExecuteMode::kCompute;
    } else if (iequals(t, "timing")) {
      c.execute = ExecuteMode::kTiming;
    } else {
      bad_value(kExecuteVar, *v, "compute (kernels and copies run) or timing (they are only timed; needs OPENREG_DEVICE_PROFILE)");
    }
  }
  return c.resolved();
}

Config Config::resolved() const {
  Config c = *this;
  if (c.device_count < 1 || c.device_count > kMaxDevices) {
    bad_value(kDeviceCountVar, std::to_string(c.device_count), "an integer from 1 to 64");
  }
  if (c.compute_threads < 0 || c.compute_threads > kMaxComputeThreads) {
    bad_value(kComputeThreadsVar, std::to_string(c.compute_threads), "an integer from 1 to 1024");
  }
  // See Note [Elastic device concurrency]: a cap, not a reservation, so every device may use every core.
  if (c.compute_threads == static_cast<int>(kDerive)) c.compute_threads = available_cores();
  if (c.launch_queue_depth < kMinLaunchQueueDepth || c.launch_queue_depth > kMaxLaunchQueueDepth) {
    bad_value(kLaunchQueueDepthVar, std::to_string(c.launch_queue_depth),
              "an integer from " + std::to_string(kMinLaunchQueueDepth) + " to " + std::to_string(kMaxLaunchQueueDepth));
  }
  if (c.execute == ExecuteMode::kTiming && !c.device_profile) {
    bad_value(kExecuteVar, "timing", "compute, or timing together with OPENREG_DEVICE_PROFILE (a timing-only run times its work on a model)");
  }
  if (c.memory_capacity == kDerive && c.execute == ExecuteMode::kTiming) c.memory_capacity = c.device_profile->memory_bytes;
  if (c.memory_capacity == kDerive) c.memory_capacity = std::max<std::uint64_t>(1, physical_memory() / (2 * c.device_count));
  return c;
}

}  // namespace openreg::sim
