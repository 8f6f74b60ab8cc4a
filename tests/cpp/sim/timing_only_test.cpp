// Timing-only execution (OPENREG_EXECUTE=timing, Note [Timing-only execution] in stream.cpp): kernels and
// copies are timed on the virtual clock and not run, host reads see zeros, and device memory is
// unbacked address space of the profile's capacity.

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "openreg/sim/config.h"
#include "openreg/sim/cost.h"
#include "openreg/sim/device.h"
#include "openreg/sim/error.h"
#include "openreg/sim/event.h"
#include "openreg/sim/profile.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "openreg/sim/timing_only.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

Config timing_only() {
  Config c = test::make_config(1, 1, kDerive);
  c.device_profile = load_device_profile("h100-sxm", "test");
  c.execute = ExecuteMode::kTiming;
  return c;
}

// Resident memory of this process, bytes (/proc/self/statm's second field, in pages).
std::uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Note [Values in timing-only execution]: a kernel whose cost counts at most
// kTimingOnlyRunKernelBytes runs (arithmetic on control data), one byte more does not, an uncosted one
// does not, and what a small kernel raises is dropped (its inputs may be values never computed).
TEST(TimingOnly, KernelsOfAtMostAFewBytesRunAndWhatTheyRaiseIsDropped) {
  Runtime runtime(timing_only());
  auto s = runtime.device(0).create_stream();
  std::atomic<int> small{0};
  std::atomic<int> large{0};
  std::atomic<int> uncosted{0};
  std::atomic<int> after{0};
  KernelCost at_bound{};
  at_bound.bytes = static_cast<double>(kTimingOnlyRunKernelBytes);
  KernelCost above = at_bound;
  above.bytes += 1;
  s->launch("sum", [&] { small.fetch_add(1); }, at_bound);
  s->launch("mul", [&] { large.fetch_add(1); }, above);
  s->launch("uncosted", [&] { uncosted.fetch_add(1); });
  s->launch("assert", [] { throw std::runtime_error("Expected Tensor with single nonzero value"); }, at_bound);
  s->launch("after", [&] { after.fetch_add(1); }, at_bound);
  EXPECT_NO_THROW(s->synchronize());
  EXPECT_EQ(small.load(), 1);
  EXPECT_EQ(large.load(), 0);
  EXPECT_EQ(uncosted.load(), 0);
  EXPECT_EQ(after.load(), 1);
}

TEST(TimingOnly, KernelsAreTimedNotRunAndHostCallbacksRun) {
  Runtime runtime(timing_only());
  auto s = runtime.device(0).create_stream();
  std::atomic<int> kernels{0};
  std::atomic<int> callbacks{0};
  auto begin = Event::create(true);
  auto end = Event::create(true);
  s->record(begin);
  KernelCost gemm{1e12, 0, NumberFormat::kBf16, true, 128 * 12, 128 * 11};  // one full wave
  s->launch("matmul", [&] { kernels.fetch_add(1); }, gemm);
  s->host_callback("release", [&] { callbacks.fetch_add(1); });
  s->record(end);
  s->synchronize();
  EXPECT_EQ(kernels.load(), 0);
  EXPECT_EQ(callbacks.load(), 1);
  const DeviceProfile& p = *runtime.profile();
  const double kernel_ms = 1e12 / (p.tensor_flops[static_cast<int>(NumberFormat::kBf16)] * p.gemm_efficiency) * 1e3;
  EXPECT_NEAR(begin->elapsed_ms(*end), (p.launch_ns + p.host_op_ns) / 1e6 + kernel_ms, 2e-6);
}

// Note [Values in timing-only execution]: a copy of at most kTimingOnlyMovedBytes moves its data
// (the counts and indices a program reads back to steer itself); a larger one moves nothing, and the
// host reads zeros.
TEST(TimingOnly, SmallCopiesMoveTheirDataAndLargerOnesMoveNothing) {
  Runtime runtime(timing_only());
  Device& dev = runtime.device(0);
  auto s = dev.create_stream();
  for (const std::size_t bytes : {std::size_t{4096}, kTimingOnlyMovedBytes, kTimingOnlyMovedBytes + 1}) {
    std::vector<unsigned char> host(bytes, 0xAB);
    void* d = dev.memory().allocate(bytes);
    s->copy(d, host.data(), host.size());
    s->synchronize();
    std::fill(host.begin(), host.end(), 0x11);
    s->copy(host.data(), d, host.size());
    s->synchronize();
    const unsigned char expected = bytes <= kTimingOnlyMovedBytes ? 0xAB : 0;
    EXPECT_EQ(std::count(host.begin(), host.end(), expected), static_cast<std::ptrdiff_t>(bytes)) << bytes;
    dev.memory().free(d);
  }
}

// Note [Values in timing-only execution]: which bytes hold values, as intervals that merge and split.
TEST(TimingOnly, MemoryTracksWhichBytesHoldValues) {
  Runtime runtime(timing_only());
  DeviceMemory& memory = runtime.device(0).memory();
  auto* p = static_cast<unsigned char*>(memory.allocate(4096));
  EXPECT_FALSE(memory.holds_values(p, 1)) << "a fresh allocation holds values";
  memory.set_holds_values(p, 100, true);
  memory.set_holds_values(p + 50, 100, true);  // overlaps: one interval [0, 150)
  EXPECT_TRUE(memory.holds_values(p, 150));
  EXPECT_FALSE(memory.holds_values(p, 151));
  memory.set_holds_values(p + 150, 10, true);  // adjacent: merged into [0, 160)
  EXPECT_TRUE(memory.holds_values(p + 10, 150));
  memory.set_holds_values(p + 20, 10, false);  // a hole splits it
  EXPECT_FALSE(memory.holds_values(p, 160));
  EXPECT_TRUE(memory.holds_values(p, 20));
  EXPECT_TRUE(memory.holds_values(p + 30, 130));
  EXPECT_FALSE(memory.holds_values(p + 19, 2));
  memory.set_holds_values(p, 4096, true);  // covers every piece
  EXPECT_TRUE(memory.holds_values(p, 4096));
  memory.free(p);
  auto* q = static_cast<unsigned char*>(memory.allocate(4096));  // the kernel may give the address back
  EXPECT_FALSE(memory.holds_values(q, 1)) << "a freed allocation kept its values";
  memory.free(q);

  Runtime backed(test::make_config(1, 1, kDerive));
  void* b = backed.device(0).memory().allocate(64);
  EXPECT_TRUE(backed.device(0).memory().holds_values(b, 64)) << "everything runs: everything holds values";
  backed.device(0).memory().free(b);
}

// Note [Values in timing-only execution]: a kernel runs when what it reads holds values, and what it
// writes then holds values; one reading values never computed only takes its time, and what it writes,
// read back, is zeros, not what the block held before.
TEST(TimingOnly, KernelsRunOnValuesAndWhatTheyWriteHoldsValues) {
  Runtime runtime(timing_only());
  Device& dev = runtime.device(0);
  auto s = dev.create_stream();
  constexpr std::size_t kBytes = 64 << 10;  // above kTimingOnlyRunKernelBytes: runs only on values
  std::vector<unsigned char> host(kBytes, 7);
  auto* positions = static_cast<unsigned char*>(dev.memory().allocate(kBytes));
  auto* mask = static_cast<unsigned char*>(dev.memory().allocate(kBytes));
  auto* weights = static_cast<unsigned char*>(dev.memory().allocate(32 << 20));  // never given values
  s->copy(positions, host.data(), kBytes);
  KernelCost cost{};
  cost.bytes = 2.0 * kBytes;
  auto compare = [&](const unsigned char* in, unsigned char* out) {
    const std::array<ByteRange, 1> reads{ByteRange{in, kBytes}};
    const std::array<ByteRange, 1> writes{ByteRange{out, kBytes}};
    s->launch("eq", [in, out, kBytes] { for (std::size_t i = 0; i < kBytes; ++i) out[i] = in[i] == 7 ? 1 : 0; }, cost,
              KernelAccess{reads, writes});
  };
  compare(positions, mask);
  std::vector<unsigned char> back(kBytes, 0xEE);
  s->copy(back.data(), mask, kBytes);
  s->synchronize();
  EXPECT_EQ(std::count(back.begin(), back.end(), 1), static_cast<std::ptrdiff_t>(kBytes)) << "the kernel on values did not run";
  EXPECT_TRUE(dev.memory().holds_values(mask, kBytes));

  compare(weights, mask);  // reads no values: only timed; the mask now holds none
  s->copy(back.data(), mask, kBytes);
  s->synchronize();
  EXPECT_EQ(std::count(back.begin(), back.end(), 0), static_cast<std::ptrdiff_t>(kBytes))
      << "a host read of values never computed saw the block's earlier bytes";
  EXPECT_FALSE(dev.memory().holds_values(mask, 1));

  // A kernel on values fails as on a GPU: its failure is reported, not dropped.
  const std::array<ByteRange, 1> reads{ByteRange{positions, kBytes}};
  s->launch("index", [] { throw std::runtime_error("index 9 is out of bounds"); }, cost, KernelAccess{reads, {}});
  try {
    s->synchronize();
    ADD_FAILURE() << "the failure of a kernel on values was dropped";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kWorkFailed);
    EXPECT_NE(std::string(e.what()).find("index 9 is out of bounds"), std::string::npos) << e.what();
  }

  // Reading nothing (a fill), a kernel runs up to kTimingOnlyMovedBytes; on values, up to
  // kTimingOnlyValuedKernelBytes read plus written.
  std::atomic<int> ran{0};
  for (const std::size_t bytes : {kTimingOnlyMovedBytes, kTimingOnlyMovedBytes + 1}) {
    const std::array<ByteRange, 1> writes{ByteRange{weights, bytes}};
    s->launch("fill", [&] { ran.fetch_add(1); }, cost, KernelAccess{{}, writes});
    EXPECT_EQ(dev.memory().holds_values(weights, bytes), bytes <= kTimingOnlyMovedBytes) << bytes;
  }
  const std::array<ByteRange, 1> big_writes{ByteRange{weights, kTimingOnlyValuedKernelBytes}};
  s->launch("expand", [&] { ran.fetch_add(1); }, cost, KernelAccess{reads, big_writes});
  s->synchronize();
  EXPECT_EQ(ran.load(), 1) << "only the fill within the bound runs";
  EXPECT_FALSE(dev.memory().holds_values(weights, 1));
  for (void* p : {static_cast<void*>(positions), static_cast<void*>(mask), static_cast<void*>(weights)}) {
    dev.memory().free(p);
  }
}

TEST(TimingOnly, ADeviceHoldsTheProfilesCapacityWithoutResidentMemory) {
  Runtime runtime(timing_only());
  DeviceMemory& memory = runtime.device(0).memory();
  EXPECT_EQ(memory.capacity(), 80ull << 30);  // the H100 profile's, not this machine's
  const std::uint64_t before = resident_bytes();
  void* big = memory.allocate(60ull << 30);
  ASSERT_NE(big, nullptr);
  EXPECT_LT(resident_bytes() - before, 64ull << 20) << "an unbacked allocation took resident memory";
  EXPECT_EQ(static_cast<const unsigned char*>(big)[12345], 0);  // reads see zeros
  EXPECT_THROW(memory.allocate(30ull << 30), OutOfMemoryError);  // 60 + 30 > 80 GiB, as on the GPU
  memory.free(big);
  void* again = memory.allocate(70ull << 30);
  memory.free(again);
}

TEST(TimingOnly, TheModeNeedsAProfileAndAKnownValue) {
  ::setenv("OPENREG_EXECUTE", "timing", 1);
  ::unsetenv("OPENREG_DEVICE_PROFILE");
  try {
    Config::from_env();
    ADD_FAILURE() << "timing-only execution without a profile was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("OPENREG_DEVICE_PROFILE"), std::string::npos) << e.what();
  }
  ::setenv("OPENREG_DEVICE_PROFILE", "h100-sxm", 1);
  const Config c = Config::from_env();
  EXPECT_EQ(c.execute, ExecuteMode::kTiming);
  EXPECT_EQ(c.memory_capacity, 80ull << 30);
  ::setenv("OPENREG_EXECUTE", "dry-run", 1);
  EXPECT_THROW(Config::from_env(), ConfigError);
  ::unsetenv("OPENREG_EXECUTE");
  ::unsetenv("OPENREG_DEVICE_PROFILE");
}

}  // namespace
}  // namespace openreg::sim
