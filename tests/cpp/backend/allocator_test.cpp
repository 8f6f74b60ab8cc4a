// The caching device allocator: CUDA's stream-ordered reuse (Note [Stream-ordered device memory] in
// memory/DeviceAllocator.cpp), record_stream, pools, split and merge, statistics, emptyCache, the OOM
// retry that waits for queued work, and frees from many threads. Devices get a small capacity so OOM
// is reachable. Streams are held with a gate: a host callback blocking until the test opens it.

#include "backend/memory/DeviceAllocator.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"

#include <openreg/sim/device.h>
#include <openreg/sim/memory.h>
#include <openreg/sim/stream.h>

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <random>
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

//! Holds a stream: work enqueued after close() runs only once open() is called.
class Gate {
 public:
  void close(const c10::Stream& stream) {
    auto opened = promise_->get_future().share();
    c10::openreg::sim_stream(stream).host_callback("test::gate", [opened] { opened.wait(); });
  }
  void open() {
    if (!opened_) promise_->set_value();
    opened_ = true;
  }
  ~Gate() { open(); }

 private:
  std::shared_ptr<std::promise<void>> promise_ = std::make_shared<std::promise<void>>();
  bool opened_ = false;
};

//! Makes `stream` current for its device on this thread for the scope.
class StreamScope {
 public:
  explicit StreamScope(c10::Stream stream) : previous_(c10::openreg::exchange_stream(stream)) {}
  ~StreamScope() { c10::openreg::exchange_stream(previous_); }

 private:
  c10::Stream previous_;
};

class AllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    c10::openreg::init();
    c10::openreg::set_device(0);
    c10::openreg::synchronize_device(0);
    device_allocator().emptyCache();
    device_allocator().resetAccumulatedStats(0);
    device_allocator().resetPeakStats(0);
  }
  static c10::CachingDeviceAllocator::DeviceStats stats() { return device_allocator().getDeviceStats(0); }
  static c10::Stream default_stream() { return c10::openreg::default_stream(0); }
  static c10::Stream side_stream() { return c10::openreg::stream_from_pool(0, 0); }
};

TEST_F(AllocatorTest, ReusesAFreedBlockWithoutAskingTheDevice) {
  { auto p = device_allocator().allocate(1000); ASSERT_NE(p.get(), nullptr); }
  const auto before = stats();
  { auto p = device_allocator().allocate(1000); }
  const auto after = stats();
  EXPECT_EQ(after.num_device_alloc, before.num_device_alloc);
  EXPECT_EQ(after.reserved_bytes[0].current, before.reserved_bytes[0].current);
  EXPECT_EQ(after.allocation[0].allocated, before.allocation[0].allocated + 1);
}

TEST_F(AllocatorTest, SegmentsFollowCudasPoolSizes) {
  auto small = device_allocator().allocate(4000);        // small pool: a 2 MiB segment
  // 10 MiB and up: a segment rounded to 2 MiB; the 1 MiB - 512 rest is too small to split off.
  auto big = device_allocator().allocate(11 * kMiB + 1);
  auto medium = device_allocator().allocate(4 * kMiB);   // large pool, under 10 MiB: a 20 MiB segment
  auto s = stats();
  EXPECT_EQ(s.segment[1].current, 1);
  EXPECT_EQ(s.segment[2].current, 2);
  EXPECT_EQ(s.reserved_bytes[1].current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.reserved_bytes[2].current, static_cast<int64_t>(20 * kMiB + 12 * kMiB));
  EXPECT_EQ(s.allocation[0].current, 3);
  EXPECT_EQ(s.allocation[1].current, 1);
  EXPECT_EQ(s.allocation[2].current, 2);
  EXPECT_EQ(s.allocated_bytes[0].current, static_cast<int64_t>(4096 + 4 * kMiB + 12 * kMiB));
  EXPECT_EQ(s.requested_bytes[0].current, static_cast<int64_t>(4000 + 4 * kMiB + 11 * kMiB + 1));
  small.clear();
  medium.clear();
  big.clear();
  s = stats();
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.active_bytes[0].current, 0);
  EXPECT_EQ(s.requested_bytes[0].current, 0);
  EXPECT_EQ(s.allocated_bytes[0].peak, static_cast<int64_t>(4096 + 4 * kMiB + 12 * kMiB));
  EXPECT_EQ(s.reserved_bytes[0].current, static_cast<int64_t>(34 * kMiB));  // still cached
  device_allocator().resetPeakStats(0);
  EXPECT_EQ(stats().allocated_bytes[0].peak, 0);
  device_allocator().resetAccumulatedStats(0);
  EXPECT_EQ(stats().allocation[0].allocated, 0);
  EXPECT_EQ(stats().allocation[0].freed, 0);
}

TEST_F(AllocatorTest, BlocksAreSplitAndMergedBack) {
  auto a = device_allocator().allocate(1000);  // 1024 bytes at the start of a 2 MiB segment
  auto b = device_allocator().allocate(3000);  // 3072 bytes right after it
  EXPECT_EQ(static_cast<char*>(b.get()), static_cast<char*>(a.get()) + 1024);
  auto s = stats();
  EXPECT_EQ(s.segment[0].current, 1);
  EXPECT_EQ(s.inactive_split[0].current, 1);  // the rest of the segment
  EXPECT_EQ(s.inactive_split_bytes[0].current, static_cast<int64_t>(2 * kMiB - 4096));
  void* first = a.get();
  a.clear();  // cannot merge: b is allocated
  s = stats();
  EXPECT_EQ(s.inactive_split[0].current, 2);
  EXPECT_EQ(s.inactive_split_bytes[0].current, static_cast<int64_t>(2 * kMiB - 3072));
  {
    auto again = device_allocator().allocate(900);  // best fit: the freed 1024-byte block
    EXPECT_EQ(again.get(), first);
  }
  b.clear();  // merges with both neighbours: the segment is whole again
  s = stats();
  EXPECT_EQ(s.inactive_split[0].current, 0);
  EXPECT_EQ(s.inactive_split_bytes[0].current, 0);
  EXPECT_EQ(device_allocator().cached_block_count(0), 1u);
  auto whole = device_allocator().allocate(kMiB);  // the merged segment serves a 1 MiB request
  EXPECT_EQ(whole.get(), first);
  EXPECT_EQ(stats().num_device_alloc, 1);
}

TEST_F(AllocatorTest, LargeBlocksSplitOnlyWhenTheRestExceedsTheSmallSize) {
  auto a = device_allocator().allocate(4 * kMiB);  // in a 20 MiB segment: the 16 MiB rest is split off
  auto b = device_allocator().allocate(15 * kMiB + kMiB / 2);  // the rest: 512 KiB over is kept whole
  EXPECT_EQ(static_cast<char*>(b.get()), static_cast<char*>(a.get()) + 4 * kMiB);
  EXPECT_EQ(stats().allocated_bytes[2].current, static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(stats().num_device_alloc, 1);
}

TEST_F(AllocatorTest, ReusesABlockOnItsStreamBeforeEarlierWorkRan) {
  Gate gate;
  gate.close(default_stream());
  auto p = device_allocator().allocate(4096);
  void* address = p.get();
  // Queued work on the block holds only its address, like a kernel's CPU alias.
  std::atomic<bool> wrote{false};
  c10::openreg::sim_stream(default_stream()).host_callback("test::write", [address, &wrote] {
    std::memset(address, 1, 4096);
    wrote.store(true);
  });
  p.clear();
  EXPECT_EQ(stats().allocated_bytes[0].current, 0) << "memory_allocated drops at the free";
  auto q = device_allocator().allocate(4096);
  EXPECT_EQ(q.get(), address) << "the same stream takes the block back at once";
  EXPECT_FALSE(wrote.load()) << "the earlier work has not run yet";
  gate.open();
  c10::openreg::sim_stream(default_stream()).synchronize();
  EXPECT_TRUE(wrote.load());
}

TEST_F(AllocatorTest, NoReuseAcrossStreamsWithoutRecordStream) {
  auto p = device_allocator().allocate(4096);
  void* address = p.get();
  p.clear();
  {
    StreamScope scope(side_stream());
    auto q = device_allocator().allocate(4096);
    EXPECT_NE(q.get(), address);
  }
  auto r = device_allocator().allocate(4096);
  EXPECT_EQ(r.get(), address) << "its own stream still takes it";
}

TEST_F(AllocatorTest, RecordStreamDelaysReuseUntilTheRecordedWorkCompleted) {
  const c10::Stream side = side_stream();
  Gate gate;
  gate.close(side);
  auto p = device_allocator().allocate(4096);
  void* address = p.get();
  device_allocator().recordStream(p, side);
  device_allocator().recordStream(p, default_stream());  // the allocation stream: nothing to record
  p.clear();
  auto s = stats();
  EXPECT_EQ(s.allocated_bytes[0].current, 0) << "memory_allocated drops at the free";
  EXPECT_EQ(s.active_bytes[0].current, 4096) << "the block stays active while the side stream works";
  auto q = device_allocator().allocate(4096);
  EXPECT_NE(q.get(), address) << "reused while the recorded stream may still use it";
  gate.open();
  c10::openreg::sim_stream(side).synchronize();
  auto r = device_allocator().allocate(4096);
  EXPECT_EQ(r.get(), address) << "reusable once the recorded stream's work completed";
  EXPECT_EQ(stats().active_bytes[0].current, 2 * 4096);
}

TEST_F(AllocatorTest, EmptyCacheWaitsForTheWorkOfCachedBlocks) {
  Gate gate;
  gate.close(default_stream());
  auto p = device_allocator().allocate(8 * kMiB);
  void* address = p.get();
  std::atomic<bool> wrote{false};
  c10::openreg::sim_stream(default_stream()).host_callback("test::write", [address, &wrote] {
    std::memset(address, 1, 8 * kMiB);  // would be a use after free if the segment were released
    wrote.store(true);
  });
  p.clear();
  std::thread empty([] { device_allocator().emptyCache(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GT(stats().reserved_bytes[0].current, 0) << "released while queued work may use it";
  gate.open();
  empty.join();
  EXPECT_TRUE(wrote.load());
  EXPECT_EQ(stats().reserved_bytes[0].current, 0);
  EXPECT_GE(stats().num_sync_all_streams, 1);
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

TEST_F(AllocatorTest, OutOfMemoryRetrySucceedsOnceQueuedWorkCompletes) {
  const c10::Stream side = side_stream();
  Gate gate;
  gate.close(side);
  {
    auto p = device_allocator().allocate(40 * kMiB);
    device_allocator().recordStream(p, side);
  }  // freed, but the side stream may still use it
  // Another stream's allocation needs that memory: the allocator must wait for the side stream.
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.open();
  });
  c10::DataPtr big;
  {
    StreamScope scope(c10::openreg::stream_from_pool(0, -1));
    EXPECT_NO_THROW(big = device_allocator().allocate(40 * kMiB));
  }
  opener.join();
  EXPECT_NE(big.get(), nullptr);
  EXPECT_EQ(stats().num_alloc_retries, 1);
  EXPECT_EQ(stats().num_ooms, 0);
  EXPECT_GE(stats().num_sync_all_streams, 1);
}

TEST_F(AllocatorTest, OutOfMemoryRaisesOutOfMemoryErrorAndStaysUsable) {
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
    EXPECT_NE(msg.find("40.00 MiB is allocated by PyTorch (live tensors)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("held by queued work"), std::string::npos) << msg;
  }
  EXPECT_EQ(stats().num_ooms, 1);
  EXPECT_EQ(stats().allocated_bytes[0].current, static_cast<int64_t>(40 * kMiB));
  held.clear();
  auto p = device_allocator().allocate(40 * kMiB);  // recoverable: free, continue
  EXPECT_NE(p.get(), nullptr);
  // The other device was never affected.
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, 1));
  EXPECT_NE(device_allocator().allocate(40 * kMiB).get(), nullptr);
}

TEST_F(AllocatorTest, MemoryFractionCapsTheReservedBytes) {
  device_allocator().set_memory_fraction(0.5, 0);
  EXPECT_THROW(device_allocator().allocate(40 * kMiB), c10::OutOfMemoryError);
  EXPECT_NE(device_allocator().allocate(20 * kMiB).get(), nullptr);
  device_allocator().set_memory_fraction(1.0, 0);
  EXPECT_NE(device_allocator().allocate(40 * kMiB).get(), nullptr);
  EXPECT_THROW(device_allocator().set_memory_fraction(1.5, 0), c10::ValueError);
}

TEST_F(AllocatorTest, StatsStayConsistentUnderManyThreads) {
  constexpr int kThreads = 8;
  const c10::Stream side = side_stream();
  const c10::Stream recorded = c10::openreg::stream_from_pool(0, -1);
  std::atomic<int> ooms{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, side, recorded, &ooms] {
      c10::openreg::set_device(0);
      std::mt19937 rng(t);
      StreamScope scope(t % 2 == 0 ? c10::openreg::default_stream(0) : side);
      std::vector<c10::DataPtr> live;
      for (int i = 0; i < 2000; ++i) {
        const std::size_t size = (rng() % 32 == 0) ? kMiB + 1 + rng() % (kMiB / 2) : 1 + rng() % 65536;
        try {
          live.push_back(device_allocator().allocate(size));
        } catch (const c10::OutOfMemoryError&) {
          ooms.fetch_add(1);
          continue;
        }
        if (rng() % 3 == 0) device_allocator().recordStream(live.back(), recorded);
        if (live.size() > 6) live.erase(live.begin() + static_cast<std::ptrdiff_t>(rng() % live.size()));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ooms.load(), 0);
  c10::openreg::synchronize_device(0);
  device_allocator().emptyCache();
  const auto s = stats();
  for (int pool = 0; pool < 3; ++pool) {
    EXPECT_EQ(s.allocation[pool].current, 0);
    EXPECT_EQ(s.allocation[pool].allocated, s.allocation[pool].freed);
    EXPECT_EQ(s.allocated_bytes[pool].current, 0);
    EXPECT_EQ(s.active[pool].current, 0);
    EXPECT_EQ(s.active_bytes[pool].current, 0);
    EXPECT_EQ(s.requested_bytes[pool].current, 0);
    EXPECT_EQ(s.inactive_split[pool].current, 0);
    EXPECT_EQ(s.inactive_split_bytes[pool].current, 0);
    EXPECT_EQ(s.segment[pool].current, 0);
    EXPECT_EQ(s.reserved_bytes[pool].current, 0);
  }
  EXPECT_EQ(s.num_device_alloc, s.num_device_free);
  EXPECT_EQ(c10::openreg::sim_device(0).memory().allocated(), 0u);
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

TEST_F(AllocatorTest, SnapshotListsSegmentsBlocksAndHistory) {
  device_allocator().record_history(true, nullptr, 1000, c10::CachingDeviceAllocator::RecordContext::STATE);
  auto a = device_allocator().allocate(1000);
  { auto b = device_allocator().allocate(5000); }
  auto snap = device_allocator().snapshot();
  device_allocator().record_history(false, nullptr, 0, c10::CachingDeviceAllocator::RecordContext::NEVER);
  ASSERT_GE(snap.size(), 1u);
  ASSERT_EQ(snap[0].segments.size(), 1u);
  const auto& seg = snap[0].segments[0];
  EXPECT_EQ(seg.address, reinterpret_cast<std::size_t>(a.get()));
  EXPECT_EQ(seg.total_size, 2 * kMiB);
  EXPECT_FALSE(seg.is_large);
  ASSERT_EQ(seg.blocks.size(), 2u);  // a, and the merged rest
  EXPECT_TRUE(seg.blocks[0].allocated);
  EXPECT_EQ(seg.blocks[0].requested_size, 1000u);
  EXPECT_FALSE(seg.blocks[1].allocated);
  using A = c10::CachingDeviceAllocator::TraceEntry;
  std::vector<A::Action> actions;
  for (const auto& e : snap[0].trace) actions.push_back(e.action_);
  const std::vector<A::Action> expected{A::SEGMENT_ALLOC, A::ALLOC, A::ALLOC, A::FREE_REQUESTED, A::FREE_COMPLETED,
                                        A::SNAPSHOT};
  EXPECT_EQ(actions, expected);
}

}  // namespace
