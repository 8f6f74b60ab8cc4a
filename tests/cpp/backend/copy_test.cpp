// Copies between CPU and openreg devices and between devices, with conversions and strided layouts,
// plus the ops around them (empty, fill_, item, resize_).

#include "backend/memory/HostAllocator.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"

#include <openreg/sim/stream.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <initializer_list>
#include <memory>

namespace {

const bool g_env = [] {
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  // What torch_openreg does from Python; ATen then treats openreg as the accelerator (pinned memory).
  c10::register_privateuse1_backend("openreg");
  return true;
}();

at::TensorOptions on(int device) {
  return at::TensorOptions().device(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
}

at::Tensor sample() {
  return at::arange(24, at::kFloat).reshape({4, 6});
}

TEST(CopyTest, EmptyLandsOnTheRequestedDevice) {
  at::Tensor t = at::empty({3, 5}, on(1));
  EXPECT_EQ(t.device(), c10::Device(c10::DeviceType::PrivateUse1, 1));
  EXPECT_EQ(c10::openreg::current_device(), 0);  // the factory's guard restored the device
  EXPECT_THROW(at::empty({1}, on(7)), c10::AcceleratorError);
}

TEST(CopyTest, HostToDeviceToHostRoundTrip) {
  const at::Tensor host = sample();
  const at::Tensor back = host.to(on(0)).cpu();
  EXPECT_TRUE(at::equal(back, host));
}

TEST(CopyTest, BlockingCopyFromPageableMemoryIsCompleteOnReturn) {
  const at::Tensor host = sample();
  at::Tensor dev = at::empty({4, 6}, on(0));
  dev.copy_(host);
  // Device memory is host memory: read it directly, without synchronizing.
  std::vector<float> raw(24);
  std::memcpy(raw.data(), dev.const_data_ptr(), sizeof(float) * raw.size());
  EXPECT_TRUE(at::equal(at::from_blob(raw.data(), {4, 6}, at::kFloat), host));
}

TEST(CopyTest, NonBlockingCopiesFromPinnedMemoryAreOrderedOnTheStream) {
  at::Tensor pinned = at::empty({4, 6}, at::TensorOptions().pinned_memory(true));
  EXPECT_TRUE(c10::openreg::is_pinned_ptr(pinned.const_data_ptr()));
  pinned.copy_(sample());
  at::Tensor dev = at::empty({4, 6}, on(0));
  dev.copy_(pinned, /*non_blocking=*/true);
  at::Tensor out = at::empty({4, 6}, at::TensorOptions().pinned_memory(true));
  out.copy_(dev, /*non_blocking=*/true);
  c10::openreg::current_sim_stream(0).synchronize();
  EXPECT_TRUE(at::equal(out, sample()));
}

TEST(CopyTest, StridedAndConvertingCopies) {
  const at::Tensor host = sample();
  const at::Tensor dev = host.to(on(0));
  EXPECT_TRUE(at::equal(dev.t().cpu(), host.t()));                          // strided device -> host
  at::Tensor into = at::empty({6, 4}, on(0).dtype(at::kDouble));
  into.copy_(host.t());                                                      // strided host -> device, convert
  EXPECT_TRUE(at::equal(into.cpu(), host.t().to(at::kDouble)));
  at::Tensor same_device = at::empty({6, 4}, on(0).dtype(at::kInt));
  same_device.copy_(dev.t());                                                // device kernel
  EXPECT_TRUE(at::equal(same_device.cpu(), host.t().to(at::kInt)));
  at::Tensor broadcast = at::empty({3, 6}, on(0));
  broadcast.copy_(at::arange(6, at::kFloat));
  EXPECT_TRUE(at::equal(broadcast.cpu(), at::arange(6, at::kFloat).expand({3, 6})));
}

TEST(CopyTest, PeerCopiesBetweenDevices) {
  const at::Tensor host = sample();
  const at::Tensor on0 = host.to(on(0));
  const at::Tensor on1 = on0.to(on(1));
  EXPECT_EQ(on1.device().index(), 1);
  EXPECT_TRUE(at::equal(on1.cpu(), host));
  at::Tensor strided = at::empty({6, 4}, on(1).dtype(at::kLong));
  strided.copy_(on0.t());
  EXPECT_TRUE(at::equal(strided.cpu(), host.t().to(at::kLong)));
}

TEST(CopyTest, FillAndItemAreStreamOrdered) {
  at::Tensor t = at::empty({1000}, on(1));
  t.fill_(2.5);
  EXPECT_EQ(t[999].item<float>(), 2.5f);
  EXPECT_THROW(t.item(), c10::Error);  // more than one element
}

// Every kernel path reports a failed kernel's c10::Error with its message alone at the next
// synchronization (Note [Launching a kernel on a stream]): a C++ backtrace means nothing to the user.
void expect_clean_device_error(const std::function<void()>& enqueue, const std::string& expected) {
  enqueue();
  try {
    c10::openreg::synchronize_device(0);
    ADD_FAILURE() << "the kernel did not fail";
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
    EXPECT_EQ(msg.find("Exception raised from"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("frame #"), std::string::npos) << msg;
  }
}

TEST(CopyTest, FailedFillAndCopyKernelsReportNoBacktrace) {
  at::Tensor bytes = at::empty({4}, on(0).dtype(at::kByte));
  expect_clean_device_error([&] { bytes.fill_(300); }, "overflow");
  // The device keeps working afterwards.
  bytes.fill_(7);
  EXPECT_EQ(bytes.cpu()[3].item<int>(), 7);
}

TEST(CopyTest, PendingKernelsKeepTheMetadataTheyWereEnqueuedWith) {
  at::Tensor t = at::zeros({4, 6}).to(on(0));
  // Hold the stream so the fill below is still pending when the metadata changes.
  auto gate = std::make_shared<std::promise<void>>();
  auto opened = gate->get_future().share();
  c10::openreg::current_sim_stream(0).host_callback("test::stall", [opened] { opened.wait(); });
  t.fill_(7.0);
  t.as_strided_({2}, {1});
  gate->set_value();
  c10::openreg::current_sim_stream(0).synchronize();
  t.as_strided_({4, 6}, {6, 1});
  EXPECT_TRUE(at::equal(t.cpu(), at::full({4, 6}, 7.0f)));
}

// Work items own neither the caller's tensors nor device memory (Note [Work items hold CPU aliases,
// not tensors] in backend/engine/AsyncPath.cpp): a tensor Python also knows must not lose its last
// reference on a device thread, and a freed device block is reused in stream order. Host memory a copy
// reads or writes stays alive until the copy ran.
TEST(CopyTest, PendingWorkHoldsNeitherTensorsNorDeviceMemory) {
  const at::Tensor src = sample().to(on(0));
  at::Tensor bytes = at::empty({4, 6}, on(0));
  at::Tensor kernel = at::empty({6, 4}, on(0).dtype(at::kDouble));
  at::Tensor filled = at::empty({4, 6}, on(0));
  at::Tensor peer = at::empty({4, 6}, on(1));
  at::Tensor pinned = at::empty({4, 6}, at::TensorOptions().pinned_memory(true));
  auto gate = std::make_shared<std::promise<void>>();
  auto opened = gate->get_future().share();
  c10::openreg::current_sim_stream(0).host_callback("test::stall", [opened] { opened.wait(); });

  bytes.copy_(src);                           // byte copy on device 0
  kernel.copy_(src.t());                      // converting strided kernel copy
  filled.fill_(3.0);                          // fill_ kernel
  peer.copy_(src);                            // peer copy, runs on device 0's stream
  pinned.copy_(src, /*non_blocking=*/true);   // asynchronous D2H
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&src, &bytes, &kernel, &filled, &peer}) {
    EXPECT_EQ(t->use_count(), 1u) << "a pending work item holds a tensor";
    EXPECT_EQ(t->storage().use_count(), 1u) << "a pending work item holds device memory";
  }
  EXPECT_EQ(pinned.use_count(), 1u);
  EXPECT_GT(pinned.storage().use_count(), 1u) << "no pending work item holds the host memory";
  gate->set_value();
  c10::openreg::current_sim_stream(0).synchronize();
  EXPECT_TRUE(at::equal(bytes.cpu(), sample()));
  EXPECT_TRUE(at::equal(kernel.cpu(), sample().t().to(at::kDouble)));
  EXPECT_TRUE(at::equal(filled.cpu(), at::full({4, 6}, 3.0f)));
  EXPECT_TRUE(at::equal(peer.cpu(), sample()));
  EXPECT_TRUE(at::equal(pinned, sample()));
}

TEST(CopyTest, PendingCopiesKeepTheMetadataTheyWereEnqueuedWith) {
  const at::Tensor src = sample().to(on(0));
  at::Tensor dst = at::zeros({6, 4}).to(on(0));
  auto gate = std::make_shared<std::promise<void>>();
  auto opened = gate->get_future().share();
  c10::openreg::current_sim_stream(0).host_callback("test::stall", [opened] { opened.wait(); });
  dst.copy_(src.t());  // a kernel copy: the layouts differ
  dst.as_strided_({2}, {1});
  gate->set_value();
  c10::openreg::current_sim_stream(0).synchronize();
  dst.as_strided_({6, 4}, {4, 1});
  EXPECT_TRUE(at::equal(dst.cpu(), sample().t()));
}

TEST(CopyTest, ResizeKeepsTheOldBytes) {
  at::Tensor t = sample().reshape({24}).to(on(0));
  t.resize_({48});
  EXPECT_EQ(t.numel(), 48);
  EXPECT_TRUE(at::equal(t.slice(0, 0, 24).cpu(), sample().reshape({24})));
}

}  // namespace
