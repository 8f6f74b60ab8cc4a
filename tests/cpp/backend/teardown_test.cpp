// Teardown for C++ programs that use the backend: work queued by ops when the program exits runs to
// completion before static objects are destroyed (Note [Teardown at exit] in sim/src/runtime.cpp), and
// the pinned-memory deleter, which runs from noexcept destructors, warns instead of throwing.

#include "backend/memory/HostAllocator.h"
#include "backend/runtime/Stream.h"

#include <openreg/sim/stream.h>

#include <ATen/ATen.h>
#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

const bool g_env = [] {
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  c10::register_privateuse1_backend("openreg");
  return true;
}();

struct CollectWarnings final : c10::WarningHandler {
  std::vector<std::string> messages;
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
};

TEST(PinnedDeleter, WarnsInsteadOfThrowingForMemoryItDoesNotOwn) {
  const c10::DeleterFnPtr deleter = at::getHostAllocator(c10::DeviceType::PrivateUse1)->raw_deleter();
  CollectWarnings warnings;
  c10::WarningUtils::WarningHandlerGuard guard(&warnings);
  int foreign = 0;
  EXPECT_NO_THROW(deleter(&foreign));
  ASSERT_EQ(warnings.messages.size(), 1u);
  EXPECT_NE(warnings.messages[0].find("pinned host memory"), std::string::npos) << warnings.messages[0];
  EXPECT_NE(warnings.messages[0].find("was not freed"), std::string::npos) << warnings.messages[0];
  // From a destructor (noexcept), as storages free it: a warning, not std::terminate.
  { at::DataPtr wrapped(&foreign, &foreign, deleter, c10::Device(c10::kCPU)); }
  EXPECT_EQ(warnings.messages.size(), 2u);
  // A double free warns the same way; the first free went through.
  at::DataPtr pinned = at::getHostAllocator(c10::DeviceType::PrivateUse1)->allocate(256);
  void* raw = pinned.get();
  ASSERT_TRUE(c10::openreg::is_pinned_ptr(raw));
  pinned.clear();
  EXPECT_FALSE(c10::openreg::is_pinned_ptr(raw));
  EXPECT_NO_THROW(deleter(raw));
  EXPECT_EQ(warnings.messages.size(), 3u);
}

constexpr int kStreams = 6;  // three pooled streams on each of two devices

// Built at load, before the runtime, like a program's globals: destroyed after the drain. It fails the
// process when a stream's work has not finished by then.
struct FinishedStreams {
  std::atomic<bool> armed{false};
  std::atomic<int> count{0};
  ~FinishedStreams() {
    if (!armed.load()) return;
    std::fprintf(stderr, "at static destruction: %d of %d streams finished\n", count.load(), kStreams);
    if (count.load() != kStreams) std::_Exit(3);
  }
} g_finished;

// Queues ops on several streams of both devices and returns without synchronizing.
void queue_ops() {
  g_finished.armed.store(true);
  for (int d = 0; d < 2; ++d) {
    const auto device = static_cast<c10::DeviceIndex>(d);
    for (int s = 0; s < kStreams / 2; ++s) {
      const c10::openreg::OpenRegStream stream(c10::openreg::stream_from_pool(device, 0));
      const c10::openreg::OpenRegStream previous = c10::openreg::exchange_openreg_stream(stream);
      at::Tensor x = at::ones({128, 128}, at::TensorOptions().device(c10::Device(c10::DeviceType::PrivateUse1, device)));
      for (int i = 0; i < 20; ++i) x = at::mm(x, x).div_(128).sin_();
      stream.sim().host_callback("finished", [] { g_finished.count.fetch_add(1); });
      c10::openreg::exchange_openreg_stream(previous);
    }
  }
}

TEST(Teardown, ExitingWithOpsQueuedRunsThemFirst) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        queue_ops();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "at static destruction: 6 of 6 streams finished");
}

}  // namespace
