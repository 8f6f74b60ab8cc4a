// The PrivateUse1 device guard: device selection, the stream pool, stream exchange, and events mapped
// onto sim streams and events.

#include "backend/registration/Guard.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"

#include <openreg/sim/stream.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <string>

namespace {

namespace sim = ::openreg::sim;
constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

const bool g_env = [] {
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  return true;
}();

const c10::impl::DeviceGuardImplInterface& guard() {
  return *c10::impl::getDeviceGuardImpl(kType);
}

c10::Device dev(int i) {
  return c10::Device(kType, static_cast<c10::DeviceIndex>(i));
}

// Enqueues on `stream` a host callback that blocks until the returned promise is fulfilled, so the
// test controls when the stream makes progress.
std::shared_ptr<std::promise<void>> stall(const c10::Stream& stream) {
  auto gate = std::make_shared<std::promise<void>>();
  auto opened = std::make_shared<std::shared_future<void>>(gate->get_future().share());
  c10::openreg::sim_stream(stream).host_callback("test::stall", [opened] { opened->wait(); });
  return gate;
}

TEST(GuardTest, IsRegisteredForPrivateUse1AndCountsDevices) {
  EXPECT_EQ(guard().type(), kType);
  EXPECT_EQ(guard().deviceCount(), 2);
}

TEST(GuardTest, SetAndExchangeDevice) {
  guard().setDevice(dev(1));
  EXPECT_EQ(guard().getDevice(), dev(1));
  EXPECT_EQ(guard().exchangeDevice(dev(0)), dev(1));
  EXPECT_EQ(guard().getDevice(), dev(0));
}

TEST(GuardTest, InvalidDeviceIndexRaisesAcceleratorError) {
  EXPECT_THROW(guard().setDevice(dev(2)), c10::AcceleratorError);
  EXPECT_THROW(guard().getNewStream(dev(5)), c10::AcceleratorError);
  guard().uncheckedSetDevice(dev(9));  // must not throw
  EXPECT_EQ(guard().getDevice(), dev(0));
}

TEST(GuardTest, IndicesAreCheckedAsWholeIntegers) {
  // 256 would be device 0 and 128 device -128 once narrowed to DeviceIndex (int8).
  for (const std::int64_t bad : {std::int64_t{2}, std::int64_t{128}, std::int64_t{256}, std::int64_t{-1},
                                 std::int64_t{1} << 40}) {
    try {
      c10::openreg::checked_device_index(bad);
      ADD_FAILURE() << "index " << bad << " accepted";
    } catch (const c10::AcceleratorError& e) {
      EXPECT_NE(std::string(e.what_without_backtrace()).find("invalid device ordinal " + std::to_string(bad)),
                std::string::npos);
      EXPECT_NE(std::string(e.what_without_backtrace()).find("0..1"), std::string::npos);
    }
  }
  EXPECT_EQ(c10::openreg::checked_device_index(1), 1);
}

TEST(GuardTest, StreamPrioritiesFollowCudasConvention) {
  // Lower is higher; beyond the range clamps to it, as CUDA's pool does.
  EXPECT_EQ(c10::openreg::stream_priority(guard().getNewStream(dev(0), 0)), 0);
  EXPECT_EQ(c10::openreg::stream_priority(guard().getNewStream(dev(0), 3)), 0);
  EXPECT_EQ(c10::openreg::stream_priority(guard().getNewStream(dev(0), -1)), -1);
  EXPECT_EQ(c10::openreg::stream_priority(guard().getNewStream(dev(0), -7)), -1);
  EXPECT_EQ(c10::openreg::stream_priority(guard().getDefaultStream(dev(0))), 0);
  EXPECT_EQ(c10::openreg::stream_priority(guard().getStreamFromGlobalPool(dev(1), true)), -1);
}

TEST(GuardTest, NewStreamsAreNeverTheDefaultStream) {
  for (int i = 0; i < 70; ++i) {  // more than one round of the pool
    const c10::Stream s = guard().getNewStream(dev(0), i % 2 == 0 ? 0 : -1);
    EXPECT_NE(s.id(), guard().getDefaultStream(dev(0)).id());
    EXPECT_EQ(s.device(), dev(0));
  }
  EXPECT_NE(guard().getNewStream(dev(1)).id(), guard().getNewStream(dev(1)).id());
  EXPECT_EQ(c10::openreg::sim_stream(guard().getStreamFromGlobalPool(dev(0), true)).priority(),
            sim::StreamPriority::kHigh);
}

TEST(GuardTest, ExchangeStreamIsPerDeviceAndRestorable) {
  const c10::Stream s = guard().getNewStream(dev(1));
  const c10::Stream previous = guard().exchangeStream(s);
  EXPECT_EQ(previous, guard().getDefaultStream(dev(1)));
  EXPECT_EQ(guard().getStream(dev(1)), s);
  EXPECT_EQ(guard().getStream(dev(0)), guard().getDefaultStream(dev(0)));  // other device untouched
  guard().exchangeStream(previous);
  EXPECT_EQ(guard().getStream(dev(1)), previous);
}

TEST(GuardTest, EventCompletesWhenItsStreamReachesIt) {
  const c10::Stream s = guard().getNewStream(dev(0));
  void* event = nullptr;
  EXPECT_TRUE(guard().queryEvent(event));  // never recorded
  auto gate = stall(s);
  guard().record(&event, s, 0, c10::EventFlag::PYTORCH_DEFAULT);
  ASSERT_NE(event, nullptr);
  EXPECT_FALSE(guard().queryEvent(event));
  EXPECT_FALSE(guard().queryStream(s));
  gate->set_value();
  guard().synchronizeEvent(event);
  EXPECT_TRUE(guard().queryEvent(event));
  guard().synchronizeStream(s);
  EXPECT_TRUE(guard().queryStream(s));
  guard().destroyEvent(event, 0);
}

TEST(GuardTest, BlockMakesAnotherStreamWaitForTheEvent) {
  const c10::Stream producer = guard().getNewStream(dev(0));
  const c10::Stream consumer = guard().getNewStream(dev(1));
  auto gate = stall(producer);
  void* event = nullptr;
  guard().record(&event, producer, -1, c10::EventFlag::PYTORCH_DEFAULT);
  guard().block(event, consumer);
  std::atomic<bool> ran{false};
  c10::openreg::sim_stream(consumer).host_callback("test::after_wait", [&ran] { ran.store(true); });
  EXPECT_FALSE(guard().queryStream(consumer));
  EXPECT_FALSE(ran.load());
  gate->set_value();
  guard().synchronizeStream(consumer);
  EXPECT_TRUE(ran.load());
  guard().destroyEvent(event, 0);
}

TEST(GuardTest, ElapsedTimeNeedsTimingEvents) {
  const c10::Stream s = guard().getStream(dev(0));
  void* start = nullptr;
  void* end = nullptr;
  guard().record(&start, s, 0, c10::EventFlag::BACKEND_DEFAULT);
  guard().record(&end, s, 0, c10::EventFlag::BACKEND_DEFAULT);
  guard().synchronizeEvent(end);
  EXPECT_GE(guard().elapsedTime(start, end, 0), 0.0);

  void* plain1 = nullptr;
  void* plain2 = nullptr;
  guard().record(&plain1, s, 0, c10::EventFlag::PYTORCH_DEFAULT);
  guard().record(&plain2, s, 0, c10::EventFlag::PYTORCH_DEFAULT);
  guard().synchronizeDevice(0);
  EXPECT_THROW(guard().elapsedTime(plain1, plain2, 0), c10::ValueError);
  EXPECT_THROW(guard().elapsedTime(nullptr, end, 0), c10::Error);
  for (void* e : {start, end, plain1, plain2}) guard().destroyEvent(e, 0);
}

TEST(GuardTest, RecordRejectsAMismatchedDevice) {
  void* event = nullptr;
  EXPECT_THROW(guard().record(&event, guard().getStream(dev(0)), 1, c10::EventFlag::PYTORCH_DEFAULT), c10::Error);
  EXPECT_EQ(event, nullptr);
}

}  // namespace
