// Hot-path costs of the sim runtime: enqueue, enqueue-to-start latency, event record/query, and
// synchronize of an idle stream. Targets (medians): enqueue <= 1 us, enqueue-to-start <= 10 us,
// record <= 0.5 us, query <= 0.1 us, idle synchronize <= 0.5 us.

#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <vector>

#include "bench_util.h"
#include "openreg/sim/device.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "openreg/sim/trace.h"

namespace openreg::sim::bench {
namespace {

constexpr int kBatch = 1000;

// Cost, on the calling thread, of enqueueing a small kernel (the device drains concurrently).
void BM_LaunchEnqueue(benchmark::State& state) {
  Runtime runtime(make_config(2, 1));
  auto stream = runtime.device(0).create_stream();
  time_batched_calls(state, *stream, kBatch, [&] { stream->launch("noop", [] {}); });
}
BENCHMARK(BM_LaunchEnqueue)->UseManualTime()->Iterations(2000);

// Time from launch() on an idle but recently active stream until its item starts on the device.
void BM_EnqueueToStart(benchmark::State& state) {
  Runtime runtime(make_config(2, 1));
  auto stream = runtime.device(0).create_stream();
  std::vector<double> latencies;
  std::atomic<std::int64_t> started{0};
  for (auto _ : state) {
    const auto t0 = now_ns();
    stream->launch("stamp", [&] { started.store(now_ns(), std::memory_order_relaxed); });
    stream->synchronize();
    const auto t1 = started.load(std::memory_order_relaxed);
    state.SetIterationTime(static_cast<double>(t1 - t0) * 1e-9);
    latencies.push_back(static_cast<double>(t1 - t0));
  }
  state.counters["median_ns"] = median(latencies);
}
BENCHMARK(BM_EnqueueToStart)->UseManualTime()->Iterations(20000);

void BM_EventRecord(benchmark::State& state) {
  Runtime runtime(make_config(2, 1));
  auto stream = runtime.device(0).create_stream();
  auto event = Event::create();
  time_batched_calls(state, *stream, kBatch, [&] { stream->record(event); });
}
BENCHMARK(BM_EventRecord)->UseManualTime()->Iterations(1000);

void BM_EventQueryCompleted(benchmark::State& state) {
  Runtime runtime(make_config(2, 1));
  auto stream = runtime.device(0).create_stream();
  auto event = Event::create();
  stream->record(event);
  event->synchronize();
  for (auto _ : state) benchmark::DoNotOptimize(event->query());
}
BENCHMARK(BM_EventQueryCompleted);

void BM_SynchronizeIdleStream(benchmark::State& state) {
  Runtime runtime(make_config(2, 1));
  auto stream = runtime.device(0).create_stream();
  stream->launch("warm", [] {});
  stream->synchronize();
  for (auto _ : state) stream->synchronize();
}
BENCHMARK(BM_SynchronizeIdleStream);

}  // namespace
}  // namespace openreg::sim::bench

BENCHMARK_MAIN();
