// OpenRegStream, the typed stream handle: checked when built from a c10::Stream, then used without
// lookups; the current stream is per host thread and per device.

#include "backend/runtime/Stream.h"

#include <openreg/sim/stream.h>

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

namespace {

using c10::openreg::OpenRegStream;
constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

const bool g_env = [] {
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  return true;
}();

c10::Stream raw(int device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, static_cast<c10::DeviceIndex>(device)), id);
}

TEST(OpenRegStreamTest, WrapsTheSimStreamOfItsId) {
  const c10::Stream pooled = c10::openreg::stream_from_pool(1, 0);
  const OpenRegStream s(pooled);
  EXPECT_EQ(s.unwrap(), pooled);
  EXPECT_EQ(s.device_index(), 1);
  EXPECT_EQ(s.sim().id(), pooled.id());
  EXPECT_EQ(s.sim().device_index(), 1);
  EXPECT_EQ(&s.sim(), &c10::openreg::sim_stream(pooled));
  EXPECT_EQ(s.priority(), 0);
  EXPECT_EQ(OpenRegStream(c10::openreg::stream_from_pool(0, -1)).priority(), -1);
}

TEST(OpenRegStreamTest, BuildingOneChecksTheStream) {
  EXPECT_THROW(OpenRegStream(c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::kCPU))), c10::ValueError);
  EXPECT_THROW(OpenRegStream(raw(5, 0)), c10::AcceleratorError);
  EXPECT_THROW(OpenRegStream(raw(0, 123456)), c10::ValueError);  // an id the device never created
  EXPECT_THROW(c10::openreg::current_openreg_stream(-3), c10::AcceleratorError);
  EXPECT_THROW(c10::openreg::current_openreg_stream(9), c10::AcceleratorError);
}

TEST(OpenRegStreamTest, CurrentStreamIsPerThreadAndPerDevice) {
  const OpenRegStream default0 = c10::openreg::default_openreg_stream(0);
  EXPECT_EQ(c10::openreg::current_openreg_stream(0), default0);
  const OpenRegStream pooled(c10::openreg::stream_from_pool(0, 0));
  const OpenRegStream previous = c10::openreg::exchange_openreg_stream(pooled);
  EXPECT_EQ(previous, default0);
  EXPECT_EQ(c10::openreg::current_openreg_stream(0), pooled);
  EXPECT_EQ(&c10::openreg::current_sim_stream(0), &pooled.sim());
  EXPECT_EQ(c10::openreg::current_stream(0), pooled.unwrap());
  // Device 1 and other threads keep their own current streams.
  EXPECT_EQ(c10::openreg::current_openreg_stream(1), c10::openreg::default_openreg_stream(1));
  std::thread([&] { EXPECT_EQ(c10::openreg::current_openreg_stream(0), default0); }).join();
  c10::openreg::exchange_openreg_stream(previous);
  EXPECT_EQ(c10::openreg::current_openreg_stream(0), default0);
}

TEST(OpenRegStreamTest, QueryAndSynchronizeReportFailedWorkTranslated) {
  const OpenRegStream s(c10::openreg::stream_from_pool(0, 0));
  s.sim().launch("test::fails", [] { throw std::runtime_error("boom"); });
  EXPECT_THROW(s.synchronize(), c10::Error);
  EXPECT_TRUE(s.query());  // reported once; the stream keeps working
}

}  // namespace
