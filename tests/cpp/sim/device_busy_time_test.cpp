// Device::busy_time_ns: the compute threads' accumulated busy time (for torch.openreg.utilization()).

#include <gtest/gtest.h>

#include <chrono>

#include "openreg/sim/device.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

using test::make_config;

// Burns the calling thread until the steady clock has advanced by `d` (so the item is busy at least d).
void spin_for(std::chrono::nanoseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

TEST(DeviceBusyTime, StartsAtZeroAndCountsTheTimeItemsRun) {
  Runtime runtime(make_config(2, 1));
  Device& dev0 = runtime.device(0);
  Device& dev1 = runtime.device(1);
  EXPECT_EQ(dev0.busy_time_ns(), 0u);
  auto s = dev0.create_stream();
  for (int i = 0; i < 3; ++i) s->launch("spin", [] { spin_for(std::chrono::milliseconds(2)); });
  s->synchronize();
  // The drain's share is added just after its last item completes: wait for it, then the lower bound
  // holds by construction (the items ran at least 6 ms on dev0's threads).
  EXPECT_TRUE(test::eventually([&] { return dev0.busy_time_ns() >= 6'000'000u; })) << dev0.busy_time_ns();
  EXPECT_EQ(dev1.busy_time_ns(), 0u);  // per device
  // Host callbacks count too, on their own device only.
  const std::uint64_t dev0_before = dev0.busy_time_ns();
  auto s1 = dev1.create_stream();
  s1->host_callback("spin", [] { spin_for(std::chrono::milliseconds(2)); });
  s1->synchronize();
  EXPECT_TRUE(test::eventually([&] { return dev1.busy_time_ns() >= 2'000'000u; })) << dev1.busy_time_ns();
  EXPECT_EQ(dev0.busy_time_ns(), dev0_before);
}

TEST(DeviceBusyTime, IsMonotonicUnderConcurrentWork) {
  Runtime runtime(make_config(1, 2));
  Device& dev = runtime.device(0);
  auto a = dev.create_stream();
  auto b = dev.create_stream();
  std::uint64_t last = 0;
  for (int round = 0; round < 20; ++round) {
    a->launch("a", [] { spin_for(std::chrono::microseconds(100)); });
    b->launch("b", [] { spin_for(std::chrono::microseconds(100)); });
    const std::uint64_t now = dev.busy_time_ns();
    EXPECT_GE(now, last);
    last = now;
  }
  dev.synchronize();
  EXPECT_TRUE(test::eventually([&] { return dev.busy_time_ns() >= 40u * 100'000u; }));
}

}  // namespace
}  // namespace openreg::sim
