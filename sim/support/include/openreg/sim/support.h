#pragma once
// Helpers shared by the sim's examples (sim/examples), benchmarks (bench/sim) and tests (tests/cpp/sim):
// runtimes with an explicit configuration, and a calibrated CPU-bound kernel. Header-only, not part
// of the library's API (target openreg::sim_support); it depends on the sim's public headers alone.

#include <time.h>

#include <algorithm>
#include <cstdint>

#include "openreg/sim/config.h"

namespace openreg::sim::support {

//! The memory each device of make_config has unless told otherwise.
inline constexpr std::uint64_t kDefaultCapacity = std::uint64_t{1} << 30;

//! A configuration with every field given (nothing read from the environment).
inline Config make_config(int devices, int threads, std::uint64_t capacity = kDefaultCapacity,
                          std::uint64_t bandwidth = kUnlimitedBandwidth) {
  Config c;
  c.device_count = devices;
  c.compute_threads = threads;
  c.memory_capacity = capacity;
  c.copy_bandwidth = bandwidth;
  return c;
}

//! Pure computation for `iterations` steps (a kernel that only uses the CPU); the result defeats the
//! optimizer.
inline std::uint64_t spin(std::uint64_t iterations) {
  std::uint64_t x = 88172645463325252ull;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

//! CPU time of the calling thread, in ns.
inline std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

//! Iterations of spin() that take about `ms` milliseconds of this thread's CPU time (best of a few
//! tries; wall time would also count time the thread was descheduled on a busy machine).
inline std::uint64_t calibrate_spin(double ms) {
  constexpr std::uint64_t kProbe = 1'000'000;
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = thread_cpu_ns();
    volatile std::uint64_t sink = spin(kProbe);
    (void)sink;
    best = std::min(best, static_cast<double>(thread_cpu_ns() - t0));
  }
  return static_cast<std::uint64_t>(ms * 1e6 / best * kProbe);
}

}  // namespace openreg::sim::support
