// The PrivateUse1 hooks as ATen's Context reaches them, and fork detection.

#include "backend/memory/DeviceAllocator.h"
#include "backend/runtime/Fork.h"
#include "backend/runtime/Device.h"

#include <openreg/sim/device.h>
#include <openreg/sim/memory.h>
#include <openreg/sim/stream.h>

#include <ATen/Context.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

const bool g_env = [] {
  setenv("OPENREG_DEVICE_COUNT", "3", 1);
  return true;
}();

const at::PrivateUse1HooksInterface& hooks() {
  return at::detail::getPrivateUse1Hooks();
}

TEST(HooksTest, AreRegisteredAndReportTheDevices) {
  EXPECT_TRUE(at::isPrivateUse1HooksRegistered());
  EXPECT_TRUE(hooks().isBuilt());
  EXPECT_TRUE(hooks().isAvailable());
  EXPECT_EQ(hooks().deviceCount(), 3);
}

TEST(HooksTest, DeviceSelection) {
  hooks().setCurrentDevice(2);
  EXPECT_EQ(hooks().getCurrentDevice(), 2);
  EXPECT_EQ(hooks().exchangeDevice(1), 2);
  EXPECT_EQ(hooks().maybeExchangeDevice(-1), 1);  // negative: report only
  EXPECT_EQ(hooks().getCurrentDevice(), 1);
  EXPECT_THROW(hooks().setCurrentDevice(3), c10::AcceleratorError);
  hooks().setCurrentDevice(0);
}

TEST(HooksTest, PrimaryContextExistsOnceADeviceIsUsed) {
  EXPECT_FALSE(hooks().hasPrimaryContext(2));
  c10::openreg::sim_device(2);
  EXPECT_TRUE(hooks().hasPrimaryContext(2));
}

TEST(HooksTest, PointersMapToTheirDevice) {
  c10::DeviceGuard guard(c10::Device(kType, 1));
  auto block = c10::openreg::device_allocator().allocate(4096);
  EXPECT_EQ(hooks().getDeviceFromPtr(static_cast<char*>(block.get()) + 100), c10::Device(kType, 1));
  int on_stack = 0;
  EXPECT_THROW(hooks().getDeviceFromPtr(&on_stack), c10::ValueError);
}

TEST(HooksTest, PinnedMemoryIsRecognised) {
  c10::Allocator* pinned = hooks().getPinnedMemoryAllocator();
  ASSERT_NE(pinned, nullptr);
  auto host = pinned->allocate(1000);
  EXPECT_TRUE(hooks().isPinnedPtr(host.get()));
  int on_stack = 0;
  EXPECT_FALSE(hooks().isPinnedPtr(&on_stack));
  void* raw = host.get();
  host.clear();
  EXPECT_FALSE(hooks().isPinnedPtr(raw));
}

TEST(HooksTest, DefaultGeneratorsAreDevicesOwn) {
  const at::Generator& g = hooks().getDefaultGenerator(2);
  EXPECT_EQ(g.device(), c10::Device(kType, 2));
  EXPECT_EQ(hooks().getNewGenerator(1).device(), c10::Device(kType, 1));
}

TEST(HooksTest, AForkedChildRefusesDeviceUse) {
  c10::openreg::init();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    if (!c10::openreg::is_in_bad_fork()) code |= 1;
    try {
      c10::openreg::sim_device(0);
      code |= 2;
    } catch (const c10::Error& e) {
      if (std::string(e.what()).find("Cannot re-initialize openreg in forked subprocess") == std::string::npos) {
        code |= 4;
      }
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(c10::openreg::is_in_bad_fork());  // the parent is unaffected
}

}  // namespace
