// Runtime and Device: lazy thread-safe start, invalid indices, device synchronize and its error
// reporting, where kernels run, the global runtime.

#include "openreg/sim/runtime.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "openreg/sim/device.h"
#include "openreg/sim/error.h"
#include "openreg/sim/stream.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

using test::Gate;
using test::make_config;

using test::code_of;
TEST(Runtime, DevicesStartLazilyOnceUnderContention) {
  Runtime runtime(make_config(4, 1));
  EXPECT_EQ(runtime.device_count(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(runtime.device_started(i));
  std::vector<std::thread> threads;
  std::vector<Device*> seen(8);
  for (int t = 0; t < 8; ++t) threads.emplace_back([&, t] { seen[t] = &runtime.device(2); });
  for (auto& t : threads) t.join();
  for (Device* d : seen) EXPECT_EQ(d, seen[0]);
  EXPECT_TRUE(runtime.device_started(2));
  EXPECT_FALSE(runtime.device_started(0));
  EXPECT_EQ(runtime.device(2).index(), 2);
  EXPECT_EQ(&runtime.device(2).runtime(), &runtime);
  EXPECT_EQ(runtime.device(2).compute_threads(), 1);
}

TEST(Runtime, InvalidDeviceIndicesAreErrors) {
  Runtime runtime(make_config(2, 1));
  EXPECT_EQ(code_of([&] { runtime.device(2); }), Errc::kInvalidDevice);
  EXPECT_EQ(code_of([&] { runtime.device(-1); }), Errc::kInvalidDevice);
  EXPECT_FALSE(runtime.device_started(-1));
  EXPECT_FALSE(runtime.device_started(99));
  try {
    runtime.device(5);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("5"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("2 device"), std::string::npos);
  }
}

TEST(Runtime, ConstructorRejectsBadConfigs) {
  EXPECT_THROW(Runtime(make_config(0, 1)), ConfigError);
  EXPECT_THROW(Runtime(make_config(65, 1)), ConfigError);
  EXPECT_THROW(Runtime(make_config(1, -3)), ConfigError);
}

TEST(Runtime, DerivedSettingsAreFilledIn) {
  Config c;
  c.device_count = 2;
  Runtime runtime(c);
  EXPECT_GE(runtime.config().compute_threads, 1);
  EXPECT_GT(runtime.config().memory_capacity, 0u);
  EXPECT_EQ(runtime.device(1).memory().capacity(), runtime.config().memory_capacity);
}

class DeviceTest : public ::testing::TestWithParam<int> {
 protected:
  Runtime runtime{make_config(2, GetParam())};
};

INSTANTIATE_TEST_SUITE_P(ComputeThreads, DeviceTest, ::testing::Values(1, 2, 4));

TEST_P(DeviceTest, SynchronizeWaitsForEveryStream) {
  Device& device = runtime.device(0);
  std::atomic<int> done{0};
  std::vector<std::shared_ptr<Stream>> streams;
  for (int i = 0; i < 6; ++i) {
    auto s = device.create_stream(i % 2 ? StreamPriority::kHigh : StreamPriority::kNormal);
    for (int j = 0; j < 50; ++j) {
      s->launch("work", [&] {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        done.fetch_add(1);
      });
    }
    streams.push_back(s);
  }
  device.default_stream()->launch("work", [&] { done.fetch_add(1); });
  device.synchronize();
  EXPECT_EQ(done.load(), 6 * 50 + 1);
  for (auto& s : streams) EXPECT_TRUE(s->query());
}

TEST_P(DeviceTest, SynchronizeReportsAStreamFailureOnce) {
  Device& device = runtime.device(1);
  auto s = device.create_stream();
  auto t = device.create_stream();
  std::atomic<bool> other_ran{false};
  s->launch("exploding_kernel", [] { throw std::out_of_range("index 9 out of range"); });
  t->launch("fine", [&] { other_ran = true; });
  try {
    device.synchronize();
    FAIL() << "device synchronize did not report the failure";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kWorkFailed);
    EXPECT_EQ(std::string(e.what()), "work item 'exploding_kernel' failed on openreg:1 stream " +
                                         std::to_string(s->id()) + ": index 9 out of range");
  }
  EXPECT_TRUE(other_ran.load());
  EXPECT_NO_THROW(device.synchronize());
  EXPECT_NO_THROW(s->synchronize());  // already reported
}

TEST_P(DeviceTest, RuntimeSynchronizeCoversAllStartedDevices) {
  std::atomic<int> done{0};
  for (int d = 0; d < 2; ++d) {
    runtime.device(d).default_stream()->launch("work", [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      done.fetch_add(1);
    });
  }
  runtime.synchronize();
  EXPECT_EQ(done.load(), 2);
  runtime.device(1).default_stream()->launch("bad", [] { throw std::runtime_error("x"); });
  EXPECT_EQ(code_of([&] { runtime.synchronize(); }), Errc::kWorkFailed);
  EXPECT_NO_THROW(runtime.synchronize());
}

TEST_P(DeviceTest, KernelsRunOnALaneAndTheirParallelAlgorithmsOnTheWholeDevice) {
  Device& device = runtime.device(0);
  const auto caller = std::this_thread::get_id();
  std::thread::id ran_on;
  int lane_concurrency = 0;
  int parallel_concurrency = 0;
  std::atomic<int> sum{0};
  device.default_stream()->launch("where", [&] {
    ran_on = std::this_thread::get_id();
    // A kernel takes one compute unit (Note [Device lanes])...
    lane_concurrency = tbb::this_task_arena::max_concurrency();
    // ...and an intra-op parallel kernel's algorithm gets the device's whole concurrency.
    device.parallel([&] {
      parallel_concurrency = tbb::this_task_arena::max_concurrency();
      tbb::parallel_for(0, 1000, [&](int i) { sum.fetch_add(i); });
    });
  });
  device.default_stream()->synchronize();
  EXPECT_NE(ran_on, caller);
  EXPECT_EQ(lane_concurrency, 1);
  EXPECT_EQ(parallel_concurrency, GetParam());
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}

TEST(DeviceLanes, TwoStreamsOfOneDeviceRunOnTwoWorkersAtOnce) {
  // Each kernel waits (bounded) until the other stream's kernel is running too: only possible if the
  // two streams' drains went to different lanes and each got a worker.
  Runtime runtime(make_config(1, 2));
  Device& device = runtime.device(0);
  auto a = device.create_stream();
  auto b = device.create_stream();
  std::atomic<int> running{0};
  std::atomic<bool> met[2] = {false, false};
  auto kernel = [&](int k) {
    return [&, k] {
      running.fetch_add(1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (running.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      met[k] = running.load() >= 2;
    };
  };
  a->launch("a", kernel(0));
  b->launch("b", kernel(1));
  a->synchronize();
  b->synchronize();
  EXPECT_TRUE(met[0].load());
  EXPECT_TRUE(met[1].load());
}

TEST_P(DeviceTest, DestroyingARuntimeWaitsForPendingWork) {
  std::atomic<int> done{0};
  {
    Runtime local(make_config(2, GetParam()));
    for (int d = 0; d < 2; ++d) {
      auto s = local.device(d).create_stream();
      for (int i = 0; i < 100; ++i) s->launch("work", [&] { done.fetch_add(1); });
    }
  }
  EXPECT_EQ(done.load(), 200);
}

TEST(RuntimeGlobal, IsASingletonConfiguredFromTheEnvironment) {
  // The test environment may set OPENREG_*; either way global() must be stable.
  Runtime& a = Runtime::global();
  Runtime& b = Runtime::global();
  EXPECT_EQ(&a, &b);
  EXPECT_GE(a.device_count(), 1);
}

}  // namespace
}  // namespace openreg::sim
