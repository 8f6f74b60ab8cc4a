#pragma once
// Helpers for the sim benchmarks: medians, and timing a batch of calls that hand work to a stream.
// Runtimes with explicit configurations and the calibrated CPU-bound kernel are shared with the
// examples and tests (openreg/sim/support.h).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "openreg/sim/stream.h"
#include "openreg/sim/support.h"
#include "openreg/sim/trace.h"

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

// Times `batch` calls of issue() on the calling thread as one manually timed iteration: the cost of
// handing work to `stream` while its device drains it concurrently. After each batch the stream is
// synchronized, untimed, so that the queue does not grow without bound over thousands of iterations.
// Reports the median per call beside the mean, which one preempted batch can move.
template <typename Issue>
void time_batched_calls(benchmark::State& state, Stream& stream, int batch, Issue issue) {
  std::vector<double> per_item;
  for (auto _ : state) {
    const auto t0 = now_ns();
    for (int i = 0; i < batch; ++i) issue();
    const auto t1 = now_ns();
    state.SetIterationTime(static_cast<double>(t1 - t0) * 1e-9);
    per_item.push_back(static_cast<double>(t1 - t0) / batch);
    stream.synchronize();
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["median_ns_per_item"] = median(per_item);
}

}  // namespace openreg::sim::bench
