// Copies: ordering with kernels in one stream (H2D, kernel, D2H), peer copies, bandwidth-limited
// copies that park their stream instead of holding a compute thread, and invalid copies.

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "openreg/sim/device.h"
#include "openreg/sim/error.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"
#include "openreg/sim/stream.h"
#include "openreg/sim/trace.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

using test::make_config;

using test::code_of;
class CopyTest : public ::testing::TestWithParam<int> {
 protected:
  Runtime runtime{make_config(2, GetParam(), 64 << 20)};
};

INSTANTIATE_TEST_SUITE_P(ComputeThreads, CopyTest, ::testing::Values(1, 2, 4));

TEST_P(CopyTest, HostToDeviceKernelDeviceToHostRunInOrder) {
  Device& dev = runtime.device(0);
  auto s = dev.create_stream();
  constexpr int kN = 1 << 16;
  for (int round = 0; round < 20; ++round) {
    std::vector<int> in(kN), out(kN, -1);
    std::iota(in.begin(), in.end(), round);
    int* d = static_cast<int*>(dev.memory().allocate(kN * sizeof(int)));
    s->copy(d, in.data(), kN * sizeof(int), "h2d");
    s->launch("double", [d] {
      for (int i = 0; i < kN; ++i) d[i] *= 2;
    });
    s->copy(out.data(), d, kN * sizeof(int), "d2h");
    s->synchronize();
    for (int i = 0; i < kN; ++i) ASSERT_EQ(out[i], 2 * (i + round)) << "round " << round << " index " << i;
    dev.memory().free(d);
  }
}

TEST_P(CopyTest, LargeDeviceToHostIntoFreshUnalignedMemory) {
  // Note [Fresh host destinations]: a large copy into freshly mapped host memory (whose interior's
  // missing pages the engine fills directly) lands every byte, including the unaligned head and tail.
  Device& dev = runtime.device(0);
  auto s = dev.create_stream();
  constexpr std::size_t kBytes = (std::size_t{20} << 20) + 12345;
  void* d = dev.memory().allocate(kBytes);
  std::vector<unsigned char> pattern(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<unsigned char>(i * 131 + 7);
  s->copy(d, pattern.data(), kBytes);
  auto* fresh = static_cast<unsigned char*>(mmap(nullptr, kBytes + 8192, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(fresh, MAP_FAILED);
  unsigned char* dst = fresh + 4096 + 3;  // neither page- nor huge-page-aligned
  s->copy(dst, d, kBytes);
  s->synchronize();
  EXPECT_EQ(std::memcmp(dst, pattern.data(), kBytes), 0);
  EXPECT_EQ(fresh[4096 + 2], 0);  // nothing written before the destination
  EXPECT_EQ(dst[kBytes], 0);      // nor after it
  munmap(fresh, kBytes + 8192);
  dev.memory().free(d);
}

// A large copy into host memory whose pages are partly backed already (holding other bytes) and partly
// not: the engine switches from filling missing pages to a plain copy at the first backed page, and
// every byte of the destination ends up with the source's value, backed pages included.
TEST_P(CopyTest, LargeDeviceToHostIntoPartlyBackedMemory) {
  Device& dev = runtime.device(0);
  auto s = dev.create_stream();
  constexpr std::size_t kPage = 4096;
  constexpr std::size_t kBytes = std::size_t{8} << 20;
  void* d = dev.memory().allocate(kBytes);
  std::vector<unsigned char> pattern(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<unsigned char>(i * 37 + 11);
  s->copy(d, pattern.data(), kBytes);
  auto* dst = static_cast<unsigned char*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(dst, MAP_FAILED);
  // Back a few scattered pages (and a run in the middle) with bytes the copy must overwrite.
  for (std::size_t page : {std::size_t{5}, std::size_t{700}, std::size_t{701}, std::size_t{2047}}) {
    std::memset(dst + page * kPage, 0xEE, kPage);
  }
  std::memset(dst + kBytes / 2, 0xEE, 64 * kPage);
  s->copy(dst, d, kBytes);
  s->synchronize();
  EXPECT_EQ(std::memcmp(dst, pattern.data(), kBytes), 0);
  munmap(dst, kBytes);
  dev.memory().free(d);
}

// A large copy into a shared mapping (memfd, MAP_SHARED): the bytes reach the shared object, so a
// second mapping of it sees them.
TEST_P(CopyTest, LargeDeviceToHostIntoSharedMapping) {
  Device& dev = runtime.device(0);
  auto s = dev.create_stream();
  constexpr std::size_t kBytes = std::size_t{4} << 20;
  void* d = dev.memory().allocate(kBytes);
  std::vector<unsigned char> pattern(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<unsigned char>(i * 13 + 5);
  s->copy(d, pattern.data(), kBytes);
  const int fd = memfd_create("openreg_copy_test", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kBytes), 0);
  auto* a = static_cast<unsigned char*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  auto* b = static_cast<unsigned char*>(mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fd, 0));
  ASSERT_NE(a, MAP_FAILED);
  ASSERT_NE(b, MAP_FAILED);
  s->copy(a, d, kBytes);
  s->synchronize();
  EXPECT_EQ(std::memcmp(a, pattern.data(), kBytes), 0);
  EXPECT_EQ(std::memcmp(b, pattern.data(), kBytes), 0);
  munmap(a, kBytes);
  munmap(b, kBytes);
  close(fd);
  dev.memory().free(d);
}

TEST_P(CopyTest, PeerCopyThenUseOnTheOtherDevice) {
  Device& dev0 = runtime.device(0);
  Device& dev1 = runtime.device(1);
  constexpr std::size_t kBytes = 1 << 20;
  std::vector<unsigned char> host(kBytes), back(kBytes, 0);
  for (std::size_t i = 0; i < kBytes; ++i) host[i] = static_cast<unsigned char>(i * 31);
  void* a = dev0.memory().allocate(kBytes);
  void* b = dev1.memory().allocate(kBytes);
  auto s0 = dev0.create_stream();
  auto s1 = dev1.create_stream();
  auto copied = Event::create();
  s0->copy(a, host.data(), kBytes);
  s0->copy(b, a, kBytes, "peer");
  s0->record(copied);
  s1->wait(copied);
  s1->copy(back.data(), b, kBytes);
  s1->synchronize();
  EXPECT_EQ(back, host);
  dev0.memory().free(a);
  dev1.memory().free(b);
}

TEST_P(CopyTest, DeviceToDeviceOnOneDevice) {
  Device& dev = runtime.device(1);
  auto s = dev.default_stream();
  std::vector<int> host{1, 2, 3, 4}, out(4, 0);
  void* a = dev.memory().allocate(sizeof(int) * 4);
  void* b = dev.memory().allocate(sizeof(int) * 4);
  s->copy(a, host.data(), sizeof(int) * 4);
  s->copy(b, a, sizeof(int) * 4);
  s->copy(out.data(), b, sizeof(int) * 4);
  s->synchronize();
  EXPECT_EQ(out, host);
  dev.memory().free(a);
  dev.memory().free(b);
}

TEST_P(CopyTest, InvalidCopiesAreErrors) {
  Device& dev = runtime.device(0);
  auto s = dev.create_stream();
  void* d = dev.memory().allocate(100);
  std::vector<char> host(1000);
  EXPECT_EQ(code_of([&] { s->copy(nullptr, host.data(), 10); }), Errc::kInvalidArgument);
  EXPECT_EQ(code_of([&] { s->copy(d, nullptr, 10); }), Errc::kInvalidArgument);
  EXPECT_EQ(code_of([&] { s->copy(d, host.data(), 101); }), Errc::kInvalidArgument);  // overruns dst
  EXPECT_EQ(code_of([&] { s->copy(host.data(), static_cast<char*>(d) + 50, 51); }), Errc::kInvalidArgument);
  s->copy(host.data(), static_cast<char*>(d) + 50, 50);  // exactly to the end is fine
  s->copy(d, host.data(), 0);                            // nothing to do
  s->synchronize();
  dev.memory().free(d);
  auto gone = dev.create_stream();
  dev.destroy_stream(gone->id());
  EXPECT_EQ(code_of([&] { gone->copy(host.data(), host.data() + 10, 10); }), Errc::kInvalidStream);
  EXPECT_EQ(code_of([&] { gone->copy(host.data(), host.data() + 10, 0); }), Errc::kInvalidStream);
}

TEST(CopyBandwidth, ALimitedCopyParksItsStreamAndTakesSimulatedTime) {
  // Small, so the memcpy itself is negligible (also under sanitizers); slow, so it lasts 250 ms.
  constexpr std::size_t kBytes = 64 << 10;
  constexpr std::uint64_t kBandwidth = kBytes * 4;  // 64 KiB at 256 KiB/s: 250 ms
  // Sanitizers stall every thread while they symbolize a (suppressed) report: widen the window.
  constexpr std::int64_t kCopyNs = 250'000'000LL * test::kSanitizerDivisor;
  Runtime runtime(make_config(1, 1, 64 << 20, kBandwidth / test::kSanitizerDivisor));
  Device& dev = runtime.device(0);
  EXPECT_EQ(dev.copy_bandwidth(), kBandwidth / test::kSanitizerDivisor);
  std::vector<char> host(kBytes, 'x');
  void* d = dev.memory().allocate(kBytes);
  auto copier = dev.create_stream();
  auto computer = dev.create_stream();
  // Warm-up: threads started, first-use costs paid, before the part that is checked.
  copier->launch("warm", [] {});
  computer->launch("warm", [] {});
  dev.synchronize();
  trace_start();
  copier->copy(d, host.data(), kBytes, "slow h2d");
  // The only compute thread must stay free while the copy is in flight.
  const std::uint64_t copier_done_before = copier->completed_count();
  std::atomic<std::uint64_t> copies_done_when_kernel_ran{99};
  computer->launch("kernel", [&] { copies_done_when_kernel_ran = copier->completed_count() - copier_done_before; });
  computer->synchronize();
  copier->synchronize();
  std::vector<TraceRecord> trace = trace_stop();
  std::string timeline;
  for (const TraceRecord& r : trace) {
    timeline += std::string("\n  ") + r.name + ": " + std::to_string((r.start_ns - trace[0].start_ns) / 1000) + " us .. " +
                std::to_string((r.end_ns - trace[0].start_ns) / 1000) + " us";
  }
  EXPECT_EQ(copies_done_when_kernel_ran.load(), 0u)
      << "the kernel waited for the copy: the copy held the thread" << timeline;
  bool found = false;
  for (const TraceRecord& r : trace) {
    if (r.kind == ItemKind::kCopy && std::string(r.name) == "slow h2d") {
      found = true;
      EXPECT_EQ(r.bytes, kBytes);
      EXPECT_EQ(r.device, 0);
      EXPECT_EQ(r.stream, copier->id());
      // A lower bound that holds by construction (the engine sleeps until start + bytes/bandwidth).
      EXPECT_GE(r.end_ns - r.start_ns, kCopyNs);
    }
  }
  EXPECT_TRUE(found);
  dev.memory().free(d);
}

}  // namespace
}  // namespace openreg::sim
