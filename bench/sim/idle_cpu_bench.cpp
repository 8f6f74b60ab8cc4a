// Idle cost: with every device started (arenas, copy engines) and nothing to do, the process's CPU
// time over 1 s of wall time. Target: < 1% of a core.

#include <sys/resource.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <thread>

#include "bench_util.h"
#include "openreg/sim/device.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"

namespace openreg::sim::bench {
namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

void BM_IdleCpu(benchmark::State& state) {
  Runtime runtime(make_config(4, 1));
  std::vector<char> host(4096), back(4096);
  for (int d = 0; d < runtime.device_count(); ++d) {  // start everything: workers and both engines
    Device& dev = runtime.device(d);
    void* p = dev.memory().allocate(4096);
    dev.default_stream()->launch("warm", [] {});
    dev.default_stream()->copy(p, host.data(), 4096);
    dev.default_stream()->copy(back.data(), p, 4096);
    dev.synchronize();
    dev.memory().free(p);
  }
  // Let TBB's workers finish their post-work spinning; the claim is about a process left idle.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  double fraction = 0;
  for (auto _ : state) {
    const double c0 = cpu_seconds();
    const auto w0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    fraction = (cpu_seconds() - c0) / wall;
    state.SetIterationTime(wall);
  }
  state.counters["cpu_percent_of_a_core"] = fraction * 100.0;
}
BENCHMARK(BM_IdleCpu)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace openreg::sim::bench

BENCHMARK_MAIN();
