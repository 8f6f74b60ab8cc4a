// A process that exits with work still queued on the global runtime (Note [Teardown at exit] in
// sim/src/runtime.cpp): the work runs to completion before the static objects it uses are destroyed,
// and the process exits 0. Each scenario runs in a child process (a death test), since it ends one.

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "openreg/sim/device.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

constexpr int kDevices = 2;
constexpr int kStreamsPerDevice = 3;
constexpr int kItemsPerStream = 8;
constexpr int kChainedItems = 4;  // queued onto device 1 by a host callback on device 0, late
constexpr int kTotal = kDevices * kStreamsPerDevice * kItemsPerStream + kChainedItems;

// A static object built before the runtime (at load), as a program's globals are, which the queued
// work writes to. Its destructor runs after the drain; it fails the process if any item is still to
// run, and items fail it if they run after the destructor.
struct Ledger {
  std::atomic<bool> armed{false};  // set by the scenario: other processes of this binary do not check
  std::atomic<bool> alive{true};
  std::atomic<int> ran{0};
  std::vector<std::string> notes = std::vector<std::string>(kTotal);  // heap memory the items write

  void record(int slot) {
    if (!alive.load()) {
      std::fprintf(stderr, "an item ran after the static objects were destroyed\n");
      std::_Exit(4);
    }
    notes[static_cast<std::size_t>(slot)] = "item " + std::to_string(slot) + " ran";
    ran.fetch_add(1);
  }

  ~Ledger() {
    alive.store(false);
    if (!armed.load()) return;
    const int n = ran.load();
    std::fprintf(stderr, "at static destruction: %d of %d items ran\n", n, kTotal);
    if (n != kTotal) std::_Exit(3);
  }
} g_ledger;

void slow_item(int slot) {
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  g_ledger.record(slot);
}

// Queues kTotal items on several streams of two devices, one of which queues more work late, and
// returns without synchronizing anything.
void queue_work() {
  g_ledger.armed.store(true);
  Runtime& runtime = Runtime::global();
  int slot = 0;
  std::shared_ptr<Stream> chained_from;
  for (int d = 0; d < kDevices; ++d) {
    for (int s = 0; s < kStreamsPerDevice; ++s) {
      std::shared_ptr<Stream> stream =
          s == 0 ? runtime.device(d).default_stream() : runtime.device(d).create_stream();
      for (int i = 0; i < kItemsPerStream; ++i) {
        stream->launch("slow", [slot] { slow_item(slot); });
        ++slot;
      }
      if (d == 0 && s == kStreamsPerDevice - 1) chained_from = stream;
    }
  }
  // Queued by device work after the drain may have counted device 1's streams.
  chained_from->host_callback("chain", [&runtime, slot] {
    auto target = runtime.device(1).create_stream();
    for (int i = 0; i < kChainedItems; ++i) target->launch("chained", [s = slot + i] { slow_item(s); });
  });
}

class ExitTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(ExitTest, ReturningWithWorkQueuedRunsItBeforeStaticsAreDestroyed) {
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  const std::string expected = "at static destruction: " + std::to_string(kTotal) + " of " + std::to_string(kTotal);
  EXPECT_EXIT(
      {
        queue_work();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), expected);
}

TEST_F(ExitTest, TheDrainFromDeviceWorkDoesNotWaitForItself) {
  // As when a kernel or host callback calls exit(). (A real exit() from a compute thread crashes inside
  // oneTBB's own teardown, whatever the sim does, so the drain is called directly.)
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  EXPECT_EXIT(
      {
        Stream& stream = *Runtime::global().device(0).default_stream();
        stream.host_callback("drain", [] { Runtime::drain_at_exit(); });
        stream.launch("after", [] {});
        // _exit: a drain stuck waiting for itself must fail the test, not hang the exit too.
        _exit(test::eventually([&] { return stream.query(); }) ? 0 : 6);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(ExitTest, AHostThreadThatKeepsIssuingDoesNotHoldTheDrainForever) {
  // As a Python daemon thread that issues ops while the program exits: the drain waits for what was
  // queued when it began (and what that work queues), then ends. It chased every new item before, and
  // the exit hung.
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  EXPECT_EXIT(
      {
        Stream& stream = *Runtime::global().device(0).default_stream();
        std::atomic<bool> issuing{false};
        std::thread([&] {
          for (;;) {
            stream.launch("daemon", [] { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
            issuing.store(true);
          }
        }).detach();
        while (!issuing.load()) std::this_thread::yield();
        std::thread drain([] {
          Runtime::drain_at_exit();
          std::fprintf(stderr, "drained\n");
          std::_Exit(0);
        });
        drain.detach();
        std::this_thread::sleep_for(test::kDeadline);
        std::_Exit(7);  // the drain never ended
      },
      ::testing::ExitedWithCode(0), "drained");
}

TEST(Exit, AForkedChildDoesNotWaitForItsParentsWork) {
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  Stream& stream = *Runtime::global().device(1).default_stream();
  test::Gate gate;
  stream.launch("held", [&] { EXPECT_TRUE(gate.wait()); });
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child's copy of the runtime has the item queued and no thread that would run it.
    Runtime::drain_at_exit();
    _exit(0);
  }
  int status = -1;
  const bool exited = test::eventually([&] { return waitpid(child, &status, WNOHANG) == child; });
  gate.open();
  stream.synchronize();
  if (!exited) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the forked child's drain waited for its parent's work";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // In the parent, the drain waits for the work (none is left now) and returns.
  Runtime::drain_at_exit();
}

}  // namespace
}  // namespace openreg::sim
