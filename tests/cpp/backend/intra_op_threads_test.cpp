// A kernel's intra-op thread share (backend/ops/engine/ExecuteThreads.h): a kernel alone gets every core
// but the issuing host's while the host is awake, and every core while a host thread sleeps in a wait
// (Note [The issuing host keeps a core]); devices that ran a kernel within the sharing window split the
// cores with it (Note [Devices that share the cores]), so two devices that alternate quickly never run
// teams of all cores at once.

#include "backend/runtime/Device.h"
#include "backend/ops/engine/ExecuteThreads.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <openreg/sim/host_wait.h>
#include <openreg/sim/runtime.h>
#include <openreg/sim/stream.h>
#include <openreg/sim/support.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

namespace {

const bool g_env = [] {
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  return true;
}();

using at::openreg::IntraOpThreadsScope;
using Clock = std::chrono::steady_clock;

int cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

constexpr int kCap = 64;  // a device cap above any machine's cores: the machine's split decides

// Every core but the one an awake issuing host thread runs on.
int kernel_cores() { return std::max(1, cores() - 1); }

// Waits past the sharing window, so no device counts as recently busy.
void let_the_window_pass() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

TEST(IntraOpThreads, AKernelAloneLeavesTheAwakeHostACoreAndSetsTheThreadsCount) {
  ASSERT_EQ(c10::openreg::device_count(), 2);
  ASSERT_EQ(::openreg::sim::host_threads_asleep(), 0);
  let_the_window_pass();
  IntraOpThreadsScope scope(0, kCap);
  EXPECT_EQ(scope.threads(), kernel_cores());
  EXPECT_EQ(at::get_num_threads(), kernel_cores());  // what ATen's parallel_for on this thread will use
}

// A host thread asleep in a wait for device work while alive: it synchronizes with a stream (of a sim
// runtime of its own) whose one item holds until the destructor releases it.
class SleepingHost {
 public:
  SleepingHost() {
    stream_->launch("held", [this] {
      while (!release_.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::microseconds(100));
    });
    host_ = std::thread([this] { stream_->synchronize(); });
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (::openreg::sim::host_threads_asleep() == 0 && Clock::now() < deadline) std::this_thread::yield();
    EXPECT_EQ(::openreg::sim::host_threads_asleep(), 1) << "the host thread never slept in its wait";
  }
  ~SleepingHost() {
    release_.store(true, std::memory_order_release);
    host_.join();
  }
  SleepingHost(const SleepingHost&) = delete;
  SleepingHost& operator=(const SleepingHost&) = delete;

 private:
  ::openreg::sim::Runtime runtime_{::openreg::sim::support::make_config(1, 1)};
  std::shared_ptr<::openreg::sim::Stream> stream_ = runtime_.device(0).create_stream();
  std::atomic<bool> release_{false};
  std::thread host_;
};

TEST(IntraOpThreads, AKernelGetsEveryCoreWhileAHostThreadSleepsInAWait) {
  {
    SleepingHost asleep;
    let_the_window_pass();
    IntraOpThreadsScope scope(0, kCap);
    EXPECT_EQ(scope.threads(), cores());
    EXPECT_EQ(at::get_num_threads(), cores());
  }
  // Awake again: the next kernel leaves it its core.
  let_the_window_pass();
  IntraOpThreadsScope later(0, kCap);
  EXPECT_EQ(later.threads(), kernel_cores());
}

TEST(IntraOpThreads, ALongKernelTakesEveryCoreEvenWhileTheHostIsAwake) {
  ASSERT_EQ(::openreg::sim::host_threads_asleep(), 0);
  let_the_window_pass();
  IntraOpThreadsScope scope(0, kCap, /*outlasts_host=*/true);
  EXPECT_EQ(scope.threads(), cores());
  EXPECT_EQ(at::get_num_threads(), cores());
}

TEST(IntraOpThreads, TheDeviceCapBoundsTheShare) {
  let_the_window_pass();
  IntraOpThreadsScope scope(0, 1);
  EXPECT_EQ(scope.threads(), 1);
  EXPECT_EQ(at::get_num_threads(), 1);
}

TEST(IntraOpThreads, KernelsRunningOnTwoDevicesSplitTheCores) {
  if (cores() < 2) GTEST_SKIP() << "needs 2 cores to see a split";
  SleepingHost asleep;  // so the kernels split every core
  let_the_window_pass();
  IntraOpThreadsScope first(0, kCap);
  IntraOpThreadsScope second(1, kCap);
  EXPECT_EQ(second.threads(), cores() / 2);
}

TEST(IntraOpThreads, ADeviceThatRanJustNowStillSharesTheCores) {
  if (cores() < 2) GTEST_SKIP() << "needs 2 cores to see a split";
  // Device 1's kernel ends, then device 0's starts well within the window (retried if this thread was
  // descheduled for longer than that in between).
  SleepingHost asleep;  // so the kernels split every core
  bool checked = false;
  for (int attempt = 0; attempt < 20 && !checked; ++attempt) {
    let_the_window_pass();
    Clock::time_point ended;
    {
      IntraOpThreadsScope other(1, kCap);
      ended = Clock::now();
    }
    IntraOpThreadsScope scope(0, kCap);
    if (Clock::now() - ended > std::chrono::microseconds(500)) continue;
    EXPECT_EQ(scope.threads(), cores() / 2);
    checked = true;
  }
  EXPECT_TRUE(checked) << "never started a kernel within 0.5 ms of the other device's";
  // Once the window has passed, device 0's kernels get the whole machine again.
  let_the_window_pass();
  IntraOpThreadsScope later(0, kCap);
  EXPECT_EQ(later.threads(), cores());
}

}  // namespace
