#pragma once
// Helpers for the sim benchmarks: explicit runtimes, medians, and a calibrated CPU-bound spin.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "openreg/sim/config.h"
#include "openreg/sim/trace.h"

namespace openreg::sim::bench {

inline Config make_config(int devices, int threads, std::uint64_t bandwidth = kUnlimitedBandwidth) {
  Config c;
  c.device_count = devices;
  c.compute_threads = threads;
  c.memory_capacity = std::uint64_t{1} << 30;
  c.copy_bandwidth = bandwidth;
  return c;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

//! Pure computation for `iterations` steps; the result defeats the optimizer.
inline std::uint64_t spin(std::uint64_t iterations) {
  std::uint64_t x = 88172645463325252ull;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

inline std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

//! Iterations of spin() that take about `ms` milliseconds on this thread (best of a few tries).
inline std::uint64_t calibrate_spin(double ms) {
  constexpr std::uint64_t kProbe = 1'000'000;
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    // Thread CPU time, not wall time: on a busy machine the wall clock also counts time descheduled.
    const auto t0 = thread_cpu_ns();
    volatile std::uint64_t sink = spin(kProbe);
    (void)sink;
    best = std::min(best, static_cast<double>(thread_cpu_ns() - t0));
  }
  return static_cast<std::uint64_t>(ms * 1e6 / best * kProbe);
}

}  // namespace openreg::sim::bench
