// A kernel's intra-op thread share (backend/ops/engine/ExecuteThreads.h): a kernel alone gets every core, and
// devices that ran a kernel within the sharing window split the cores with it (Note [Devices that
// share the cores]), so two devices that alternate quickly never run teams of all cores at once.

#include "backend/runtime/Device.h"
#include "backend/ops/engine/ExecuteThreads.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
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

// Waits past the sharing window, so no device counts as recently busy.
void let_the_window_pass() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

TEST(IntraOpThreads, AKernelAloneGetsEveryCoreAndSetsTheThreadsCount) {
  ASSERT_EQ(c10::openreg::device_count(), 2);
  let_the_window_pass();
  IntraOpThreadsScope scope(0, kCap);
  EXPECT_EQ(scope.threads(), cores());
  EXPECT_EQ(at::get_num_threads(), cores());  // what ATen's parallel_for on this thread will use
}

TEST(IntraOpThreads, TheDeviceCapBoundsTheShare) {
  let_the_window_pass();
  IntraOpThreadsScope scope(0, 1);
  EXPECT_EQ(scope.threads(), 1);
  EXPECT_EQ(at::get_num_threads(), 1);
}

TEST(IntraOpThreads, KernelsRunningOnTwoDevicesSplitTheCores) {
  if (cores() < 2) GTEST_SKIP() << "needs 2 cores to see a split";
  let_the_window_pass();
  IntraOpThreadsScope first(0, kCap);
  IntraOpThreadsScope second(1, kCap);
  EXPECT_EQ(second.threads(), cores() / 2);
}

TEST(IntraOpThreads, ADeviceThatRanJustNowStillSharesTheCores) {
  if (cores() < 2) GTEST_SKIP() << "needs 2 cores to see a split";
  // Device 1's kernel ends, then device 0's starts well within the window (retried if this thread was
  // descheduled for longer than that in between).
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
