#pragma once
// Helpers for the sim benchmarks: medians. Runtimes with explicit configurations and the calibrated
// CPU-bound kernel are shared with the examples and tests (openreg/sim/support.h).

#include <algorithm>
#include <vector>

#include "openreg/sim/support.h"

namespace openreg::sim::bench {

using support::calibrate_spin;
using support::make_config;
using support::spin;
using support::thread_cpu_ns;

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace openreg::sim::bench
