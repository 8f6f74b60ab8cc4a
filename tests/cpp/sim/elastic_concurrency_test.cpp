// Note [Elastic device concurrency]: at the default configuration every device may use every core,
// streams of one device run side by side, and devices that wait on each other never starve.

#include <gtest/gtest.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <memory>
#include <vector>

#include "openreg/sim/device.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

int cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// `n` items that each wait for all the others: they complete (met == n) only if all ran at once.
struct Rendezvous {
  explicit Rendezvous(int n) : n(n) {}
  void operator()() {
    arrived.fetch_add(1);
    if (test::eventually([&] { return arrived.load() == n; })) met.fetch_add(1);
  }
  const int n;
  std::atomic<int> arrived{0};
  std::atomic<int> met{0};
};

TEST(ElasticConcurrency, OneDeviceOfSeveralUsesEveryCore) {
  if (cores() < 2) GTEST_SKIP() << "needs two cores to observe parallelism";
  // The default configuration (two devices, derived threads): one device alone gets all the cores,
  // not half of them.
  Runtime runtime(test::make_config(2, static_cast<int>(kDerive)));
  Device& device = runtime.device(0);
  EXPECT_EQ(device.compute_threads(), cores());
  Rendezvous meet(cores());
  std::vector<std::shared_ptr<Stream>> streams;
  for (int i = 0; i < cores(); ++i) {
    streams.push_back(device.create_stream());
    streams.back()->launch("rendezvous", [&] { meet(); });
  }
  for (auto& s : streams) s->synchronize();
  EXPECT_EQ(meet.met.load(), cores()) << "the device's streams never all ran at once";
}

TEST(ElasticConcurrency, TwoBusyDevicesShareTheCores) {
  if (cores() < 2) GTEST_SKIP() << "needs two cores to observe parallelism";
  Runtime runtime(test::make_config(2, static_cast<int>(kDerive)));
  Rendezvous meet(2);
  runtime.device(0).default_stream()->launch("rendezvous 0", [&] { meet(); });
  runtime.device(1).default_stream()->launch("rendezvous 1", [&] { meet(); });
  runtime.device(0).synchronize();
  runtime.device(1).synchronize();
  EXPECT_EQ(meet.met.load(), 2) << "the two devices' kernels never ran at once";
}

// Every lane of every device can run at once, as separate GPUs' streams do: kernels that wait for
// each other across devices and streams (a hand-written all-reduce spinning on its peers' flags) all
// meet. With a worker pool sized for the machine, two devices of two lanes got two workers on two
// cores, and half of these kernels never started (Note [TBB worker budget]).
TEST(ElasticConcurrency, EveryLaneOfEveryDeviceRunsAtOnce) {
  constexpr int kDevices = 2;
  const int lanes = std::max(2, cores());
  Runtime runtime(test::make_config(kDevices, lanes));
  Rendezvous meet(kDevices * lanes);
  std::vector<std::shared_ptr<Stream>> streams;
  for (int d = 0; d < kDevices; ++d) {
    for (int i = 0; i < lanes; ++i) {
      streams.push_back(runtime.device(d).create_stream());
      streams.back()->launch("rendezvous", [&] { meet(); });
    }
  }
  for (auto& s : streams) s->synchronize();
  EXPECT_EQ(meet.met.load(), kDevices * lanes) << "the devices' lanes never all ran at once";
}

TEST(ElasticConcurrency, DevicesWaitingOnEachOtherNeverStarve) {
  // More devices than cores, each holding its worker while it waits for the next device's work: the
  // pool keeps a worker per live device, so the chain completes.
  const int n = cores() + 2;
  Runtime runtime(test::make_config(n, 1));
  std::atomic<int> deepest{-1};
  // Device i's kernel launches onto device i + 1 and synchronizes it, holding its worker meanwhile.
  std::function<void(int)> hop = [&](int i) {
    if (i == n) return;
    deepest.store(i);
    Stream& stream = *runtime.device(i).default_stream();
    stream.launch("hop", [&, i] { hop(i + 1); });
    stream.synchronize();
  };
  hop(0);
  EXPECT_EQ(deepest.load(), n - 1);
}

std::atomic<int> g_idle_calls{0};
thread_local bool tl_ran_kernel = false;
std::atomic<int> g_idle_calls_after_kernel{0};
void count_idle() {
  g_idle_calls.fetch_add(1);
  if (tl_ran_kernel) g_idle_calls_after_kernel.fetch_add(1);
}

TEST(ElasticConcurrency, IdleHookRunsOnTheComputeThreadWhenItsDeviceRunsDry) {
  Runtime runtime(test::make_config(1, 2));
  set_compute_thread_idle_hook(&count_idle);
  runtime.device(0).default_stream()->launch("mark", [] { tl_ran_kernel = true; });
  runtime.device(0).synchronize();
  // The worker that ran the kernel leaves the arena once it finds nothing more to do.
  EXPECT_TRUE(test::eventually([] { return g_idle_calls_after_kernel.load() > 0; }));
  set_compute_thread_idle_hook(nullptr);
  const int before = g_idle_calls.load();
  runtime.device(0).default_stream()->launch("after", [] {});
  runtime.device(0).synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(g_idle_calls.load(), before);  // removed: no longer called
}

// Note [A stream stays on its lane]: a lone busy stream re-queues itself at the end of every drain
// slice; it must keep its compute thread (whose OpenMP team a kernel reuses) instead of hopping to
// the device's other lane, and so to another worker, once per slice.
TEST(ElasticConcurrency, ALoneStreamKeepsItsComputeThreadAcrossSlices) {
  Runtime runtime(test::make_config(1, 2));
  Stream& stream = *runtime.device(0).default_stream();
  std::mutex mutex;
  std::set<std::thread::id> threads;
  // 40 kernels of 200 us: 8 ms of work, several 1 ms slices.
  for (int i = 0; i < 40; ++i) {
    stream.launch("busy", [&] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      while (std::chrono::steady_clock::now() < until) {
      }
      std::lock_guard lock(mutex);
      threads.insert(std::this_thread::get_id());
    });
  }
  stream.synchronize();
  EXPECT_EQ(threads.size(), 1u) << "the stream's kernels ran on " << threads.size() << " compute threads";
}

// ... but a stream that its drainer wakes (an event record it completes releases another stream's
// wait) is not queued behind it on that lane: the two run side by side.
TEST(ElasticConcurrency, AStreamWokenByAnotherStreamsDrainerRunsBesideIt) {
  if (cores() < 2) GTEST_SKIP() << "needs two cores to observe parallelism";
  Runtime runtime(test::make_config(1, 2));
  Device& device = runtime.device(0);
  auto a = device.create_stream();
  auto b = device.create_stream();
  test::Gate gate;
  a->launch("hold", [&] { EXPECT_TRUE(gate.wait()); });
  auto recorded = Event::create();
  a->record(recorded);
  Rendezvous meet(2);
  a->launch("meet a", [&] { meet(); });
  b->wait(recorded);  // released by a's drainer when it completes the record
  b->launch("meet b", [&] { meet(); });
  gate.open();
  a->synchronize();
  b->synchronize();
  EXPECT_EQ(meet.met.load(), 2) << "the woken stream waited behind its waker's kernel";
}

}  // namespace
}  // namespace openreg::sim
