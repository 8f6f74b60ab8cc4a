// Interruptible host waits (Note [Interruptible host waits]): the installed check runs while a host
// thread sleeps in a synchronize() entry point and may abandon the wait by throwing; the work waited
// for still runs, and waits that must not throw never run the check.

#include "openreg/sim/host_wait.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>

#include "openreg/sim/device.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

using test::Gate;
using test::make_config;

// The check under test: counts its calls and, once `armed` is set, throws Interrupted on the test's
// own thread (as Python's signal handlers run on the main thread only). Plain globals: a HostWaitCheck
// is a function pointer.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};
std::atomic<int> g_calls{0};
std::atomic<bool> g_armed{false};
std::atomic<std::thread::id> g_target{};
void counting_check() {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  if (g_armed.load(std::memory_order_acquire) && std::this_thread::get_id() == g_target.load()) throw Interrupted();
}

class HostWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_calls = 0;
    g_armed = false;
    g_target = std::this_thread::get_id();
    set_host_wait_check(&counting_check);
  }
  void TearDown() override {
    set_host_wait_check(nullptr);
    gate.open();  // whatever a failed test left blocked
    runtime.synchronize();
  }
  //! Blocks `stream` on the gate; returns a flag set when the blocked item has run.
  std::shared_ptr<std::atomic<bool>> block(Stream& stream) {
    auto ran = std::make_shared<std::atomic<bool>>(false);
    stream.launch("blocked", [this, ran] {
      EXPECT_TRUE(gate.wait());
      ran->store(true, std::memory_order_release);
    });
    return ran;
  }
  //! Arms the check after it has run at least once (so the wait was asleep), from another thread.
  void arm_once_sleeping() {
    arming = std::thread([] {
      ASSERT_TRUE(test::eventually([] { return g_calls.load() > 0; }));
      g_armed.store(true, std::memory_order_release);
    });
  }
  void expect_interrupted_then_completed(const std::function<void()>& wait, Stream& stream,
                                         const std::shared_ptr<std::atomic<bool>>& ran) {
    arm_once_sleeping();
    EXPECT_THROW(wait(), Interrupted);
    arming.join();
    EXPECT_FALSE(ran->load(std::memory_order_acquire)) << "the wait returned only after the work ran";
    // Nothing was cancelled: the work still runs, and a later synchronize waits for it.
    g_armed = false;
    gate.open();
    stream.synchronize();
    EXPECT_TRUE(ran->load(std::memory_order_acquire));
  }

  Runtime runtime{make_config(2, 2)};
  Device& dev = runtime.device(0);
  Gate gate;
  std::thread arming;
};

TEST_F(HostWaitTest, StreamSynchronizeRunsTheCheckAndEndsWhenItThrows) {
  auto s = dev.create_stream();
  auto ran = block(*s);
  expect_interrupted_then_completed([&] { s->synchronize(); }, *s, ran);
}

TEST_F(HostWaitTest, EventSynchronizeIsInterruptible) {
  auto s = dev.create_stream();
  auto ran = block(*s);
  auto e = Event::create();
  s->record(e);
  expect_interrupted_then_completed([&] { e->synchronize(); }, *s, ran);
  EXPECT_TRUE(e->query());
}

TEST_F(HostWaitTest, DeviceSynchronizeIsInterruptible) {
  auto s = dev.create_stream();
  auto ran = block(*s);
  expect_interrupted_then_completed([&] { dev.synchronize(); }, *s, ran);
}

TEST_F(HostWaitTest, RuntimeSynchronizeIsInterruptible) {
  auto s = dev.create_stream();
  auto ran = block(*s);
  expect_interrupted_then_completed([&] { runtime.synchronize(); }, *s, ran);
}

TEST_F(HostWaitTest, AnInterruptedWaiterLeavesOthersWaiting) {
  // Two host threads wait on the same stream; interrupting one must not strand the other.
  auto s = dev.create_stream();
  auto ran = block(*s);
  std::atomic<bool> other_done{false};
  std::thread other([&] {  // runs the check too, which never throws on this thread
    s->synchronize();
    other_done.store(true);
  });
  arm_once_sleeping();
  EXPECT_THROW(s->synchronize(), Interrupted);
  arming.join();
  g_armed = false;
  gate.open();
  other.join();
  EXPECT_TRUE(other_done.load());
  EXPECT_TRUE(ran->load());
}

TEST_F(HostWaitTest, TeardownWaitsDoNotRunTheCheck) {
  // Stream destruction waits like the drain at exit and device teardown (Device::wait_idle), where
  // nothing may throw: it never runs the check.
  auto s = dev.create_stream();
  auto ran = block(*s);
  std::thread opener([&] {
    std::this_thread::sleep_for(3 * kHostWaitCheckInterval);
    gate.open();
  });
  g_armed = true;
  dev.destroy_stream(s->id());
  opener.join();
  EXPECT_TRUE(ran->load());
  EXPECT_EQ(g_calls.load(), 0);
}

TEST_F(HostWaitTest, WithoutACheckSynchronizeWaitsForTheWork) {
  set_host_wait_check(nullptr);
  auto s = dev.create_stream();
  auto ran = block(*s);
  std::thread opener([&] {
    std::this_thread::sleep_for(3 * kHostWaitCheckInterval);
    gate.open();
  });
  s->synchronize();
  opener.join();
  EXPECT_TRUE(ran->load());
}

TEST_F(HostWaitTest, AHostThreadCountsAsAsleepOnlyWhileItSleepsInAWait) {
  // Note [Host threads asleep]: kernels size their thread teams by this count.
  set_host_wait_check(nullptr);
  EXPECT_EQ(host_threads_asleep(), 0);
  auto s = dev.create_stream();
  auto ran = block(*s);
  std::thread waiter([&] { s->synchronize(); });
  EXPECT_TRUE(test::eventually([] { return host_threads_asleep() == 1; })) << "the waiter never counted as asleep";
  // A wait that finds its work done does not sleep and is never counted.
  auto idle = dev.create_stream();
  idle->synchronize();
  EXPECT_EQ(host_threads_asleep(), 1);
  gate.open();
  waiter.join();
  EXPECT_TRUE(ran->load());
  EXPECT_EQ(host_threads_asleep(), 0);
}

// A producer held by a full launch queue (Note [Bounded launch queue]) is interruptible too: its launch
// throws, a no-op takes its place (the stream's counts stay whole), and its own work never runs.
TEST_F(HostWaitTest, ALaunchWaitingForRoomInAFullQueueIsInterruptibleAndDoesNotRun) {
  Config config = make_config(1, 1);
  config.launch_queue_depth = 2;
  Runtime small{config};
  auto s = small.device(0).create_stream();
  auto ran = block(*s);
  s->launch("queued", [] {});
  std::atomic<bool> interrupted_ran{false};
  arm_once_sleeping();
  EXPECT_THROW(s->launch("interrupted", [&] { interrupted_ran.store(true); }), Interrupted);
  arming.join();
  EXPECT_FALSE(ran->load(std::memory_order_acquire)) << "the launch returned only after the queue drained";
  g_armed = false;
  gate.open();
  s->synchronize();  // returns: every ticket completed, the interrupted one's no-op included
  EXPECT_TRUE(ran->load(std::memory_order_acquire));
  EXPECT_FALSE(interrupted_ran.load());
  EXPECT_EQ(s->completed_count(), s->enqueued_count());
  std::atomic<bool> later_ran{false};
  s->launch("later", [&] { later_ran.store(true); });
  s->synchronize();
  EXPECT_TRUE(later_ran.load());
}

// Note [Host waits hold no GIL]: the client's hooks run around the sleep of an interruptible wait (a
// synchronize, a launch held by a full queue), on the sleeping thread, never around the others.
std::atomic<int> g_released{0};
std::atomic<int> g_reacquired{0};
int g_token = 0;
void* count_release() {
  g_released.fetch_add(1);
  return &g_token;
}
void count_reacquire(void* token) {
  EXPECT_EQ(token, &g_token);
  g_reacquired.fetch_add(1);
}
const HostSleepHooks kCountingHooks{&count_release, &count_reacquire};

TEST_F(HostWaitTest, SleepHooksRunAroundInterruptibleWaitsOnly) {
  set_host_wait_check(nullptr);
  set_host_sleep_hooks(&kCountingHooks);
  g_released = 0;
  g_reacquired = 0;
  // Blocks `stream` on a gate of its own that a thread opens after a few check intervals.
  auto held = [](Stream& stream) {
    auto gate = std::make_shared<Gate>();
    stream.launch("held", [gate] { EXPECT_TRUE(gate->wait()); });
    return std::thread([gate] {
      std::this_thread::sleep_for(3 * kHostWaitCheckInterval);
      gate->open();
    });
  };
  {  // a synchronize that sleeps
    auto s = dev.create_stream();
    std::thread opener = held(*s);
    s->synchronize();
    opener.join();
    EXPECT_EQ(g_released.load(), 1);
    EXPECT_EQ(g_reacquired.load(), 1);
  }
  {  // a teardown wait: no hooks
    auto s = dev.create_stream();
    std::thread opener = held(*s);
    dev.destroy_stream(s->id());
    opener.join();
    EXPECT_EQ(g_released.load(), 1);
  }
  {  // a launch held by a full launch queue
    Config config = make_config(1, 1);
    config.launch_queue_depth = 1;
    Runtime small{config};
    auto s = small.device(0).create_stream();
    std::thread opener = held(*s);
    s->launch("waits for room", [] {});
    EXPECT_EQ(g_released.load(), 2);
    EXPECT_EQ(g_reacquired.load(), 2);
    opener.join();
    s->synchronize();
  }
  set_host_sleep_hooks(nullptr);
}

}  // namespace
}  // namespace openreg::sim
