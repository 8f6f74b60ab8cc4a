// The caching device allocator: reuse, CUDA-style statistics, emptyCache, OOM retry and error, and
// frees from other threads. Devices get a small capacity so OOM is reachable.

#include "backend/OpenRegAllocator.h"
#include "backend/OpenRegRuntime.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using c10::openreg::device_allocator;
constexpr std::size_t kMiB = 1 << 20;

// Before anything starts the runtime (it reads the environment once).
const bool g_env = [] {
  setenv("OPENREG_MEMORY_CAPACITY", "64MiB", 1);
  setenv("OPENREG_DEVICE_COUNT", "2", 1);
  return true;
}();

class AllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    c10::openreg::init();
    c10::openreg::set_device(0);
    device_allocator().emptyCache();
    device_allocator().resetAccumulatedStats(0);
    device_allocator().resetPeakStats(0);
  }
  static c10::CachingDeviceAllocator::DeviceStats stats() { return device_allocator().getDeviceStats(0); }
};

TEST_F(AllocatorTest, ReusesAFreedBlockWithoutAskingTheDevice) {
  { auto p = device_allocator().allocate(1000); ASSERT_NE(p.get(), nullptr); }
  const auto before = stats();
  EXPECT_EQ(device_allocator().cached_block_count(0), 1u);
  { auto p = device_allocator().allocate(1000); }
  const auto after = stats();
  EXPECT_EQ(after.num_device_alloc, before.num_device_alloc);
  EXPECT_EQ(after.reserved_bytes[0].current, before.reserved_bytes[0].current);
  EXPECT_EQ(after.allocation[0].allocated, before.allocation[0].allocated + 1);
}

TEST_F(AllocatorTest, SmallRequestsTakeTheBestFittingCachedBlockWithinTwiceTheirSize) {
  void* small_ptr = nullptr;
  void* large_ptr = nullptr;
  {
    auto a = device_allocator().allocate(1000);  // a 1024-byte block
    auto b = device_allocator().allocate(3000);  // a 3072-byte block
    small_ptr = a.get();
    large_ptr = b.get();
  }
  ASSERT_EQ(device_allocator().cached_block_count(0), 2u);
  const auto before = stats();
  {
    auto fit = device_allocator().allocate(900);     // best fit: the 1024-byte block, not the 3072
    auto slack = device_allocator().allocate(2000);  // 2048 rounded: the 3072-byte block is within 2x
    EXPECT_EQ(fit.get(), small_ptr);
    EXPECT_EQ(slack.get(), large_ptr);
    EXPECT_EQ(stats().num_device_alloc, before.num_device_alloc);
  }
  {
    auto takes_large = device_allocator().allocate(1300);  // 1536 rounded: 1024 is too small
    auto exact = device_allocator().allocate(700);          // 1024 rounded: the 1024 block fits exactly
    auto fresh = device_allocator().allocate(300);         // 512 rounded: nothing cached is left
    EXPECT_EQ(takes_large.get(), large_ptr);
    EXPECT_EQ(exact.get(), small_ptr);
    EXPECT_NE(fresh.get(), nullptr);
    EXPECT_EQ(stats().num_device_alloc, before.num_device_alloc + 1);
  }
  {
    // Three blocks cached now (512, 1024, 3072): a 2048-byte request may not take more than twice that
    // size, and 3072 is within, so it is reused; a 600-byte one (1024) takes the 1024 block exactly.
    auto a = device_allocator().allocate(2048);
    auto b = device_allocator().allocate(600);
    EXPECT_EQ(a.get(), large_ptr);
    EXPECT_EQ(b.get(), small_ptr);
    EXPECT_EQ(device_allocator().cached_block_count(0), 1u);
  }
  {
    auto c = device_allocator().allocate(4000);  // 4096 rounded: 3072 is too small, a new block
    EXPECT_NE(c.get(), large_ptr);
    EXPECT_EQ(stats().num_device_alloc, before.num_device_alloc + 2);
  }
}

TEST_F(AllocatorTest, StatsSplitSmallAndLargePools) {
  auto small = device_allocator().allocate(4000);
  auto large = device_allocator().allocate(4 * kMiB);
  auto s = stats();
  EXPECT_EQ(s.allocation[0].current, 2);
  EXPECT_EQ(s.allocation[1].current, 1);  // small pool
  EXPECT_EQ(s.allocation[2].current, 1);  // large pool
  EXPECT_EQ(s.allocated_bytes[0].current, static_cast<int64_t>(4096 + 4 * kMiB));  // rounded to 512
  EXPECT_EQ(s.requested_bytes[0].current, static_cast<int64_t>(4000 + 4 * kMiB));
  EXPECT_EQ(s.segment[0].current, 2);
  small.clear();
  large.clear();
  s = stats();
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.allocated_bytes[0].peak, static_cast<int64_t>(4096 + 4 * kMiB));
  EXPECT_EQ(s.reserved_bytes[0].current, static_cast<int64_t>(4096 + 4 * kMiB));  // still cached
  device_allocator().resetPeakStats(0);
  EXPECT_EQ(stats().allocated_bytes[0].peak, 0);
  device_allocator().resetAccumulatedStats(0);
  EXPECT_EQ(stats().allocation[0].allocated, 0);
  EXPECT_EQ(stats().allocation[0].freed, 0);
}

TEST_F(AllocatorTest, EmptyCacheReturnsMemoryToTheDevice) {
  { auto p = device_allocator().allocate(8 * kMiB); }
  EXPECT_GT(stats().reserved_bytes[0].current, 0);
  device_allocator().emptyCache();
  EXPECT_EQ(stats().reserved_bytes[0].current, 0);
  const auto [free, total] = device_allocator().getMemoryInfo(0);
  EXPECT_EQ(total, 64 * kMiB);
  EXPECT_EQ(free, total);
}

TEST_F(AllocatorTest, OutOfMemoryReleasesTheCacheAndRetries) {
  { auto p = device_allocator().allocate(40 * kMiB); }  // cached, unused
  auto big = device_allocator().allocate(50 * kMiB);     // fits only once the cache is released
  EXPECT_NE(big.get(), nullptr);
  EXPECT_EQ(stats().num_alloc_retries, 1);
  EXPECT_EQ(stats().num_ooms, 0);
}

TEST_F(AllocatorTest, OutOfMemoryRaisesOutOfMemoryErrorWithCudaStyleMessage) {
  auto held = device_allocator().allocate(40 * kMiB);
  try {
    auto p = device_allocator().allocate(40 * kMiB);
    FAIL() << "expected an OutOfMemoryError";
  } catch (const c10::OutOfMemoryError& e) {
    const std::string msg = e.what_without_backtrace();
    EXPECT_NE(msg.find("openreg out of memory. Tried to allocate 40.00 MiB. Device 0 has a total capacity of "
                       "64.00 MiB"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("40.00 MiB is allocated by PyTorch"), std::string::npos) << msg;
  }
  EXPECT_EQ(stats().num_ooms, 1);
  EXPECT_EQ(stats().allocated_bytes[0].current, static_cast<int64_t>(40 * kMiB));
}

TEST_F(AllocatorTest, BlocksMayBeFreedFromOtherThreads) {
  std::vector<c10::DataPtr> ptrs;
  for (int i = 0; i < 200; ++i) {
    ptrs.push_back(device_allocator().allocate(512 * (1 + i % 7)));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&ptrs, t] {
      for (std::size_t i = t; i < ptrs.size(); i += 2) {
        ptrs[i].clear();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(stats().allocation[0].current, 0);
  EXPECT_EQ(stats().allocated_bytes[0].current, 0);
  EXPECT_EQ(stats().requested_bytes[0].current, 0);
}

TEST_F(AllocatorTest, AllocatesOnTheCurrentDevice) {
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, 1));
  auto p = device_allocator().allocate(1024);
  EXPECT_EQ(p.device(), c10::Device(c10::DeviceType::PrivateUse1, 1));
  EXPECT_EQ(device_allocator().getDeviceStats(1).allocation[0].current, 1);
}

TEST_F(AllocatorTest, ZeroBytesGiveANullPointerOnTheDevice) {
  auto p = device_allocator().allocate(0);
  EXPECT_EQ(p.get(), nullptr);
  EXPECT_EQ(p.device(), c10::Device(c10::DeviceType::PrivateUse1, 0));
  EXPECT_EQ(stats().allocation[0].current, 0);
}

TEST_F(AllocatorTest, StatsOfAnInvalidDeviceRaiseAcceleratorError) {
  EXPECT_THROW(device_allocator().getDeviceStats(2), c10::AcceleratorError);
  EXPECT_THROW(device_allocator().getDeviceStats(-3), c10::AcceleratorError);
}

}  // namespace
