// Device memory: alignment, accounting, OOM (and recovery), invalid frees; pinned host memory and
// pointer-to-device lookup.

#include "openreg/sim/memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "openreg/sim/error.h"
#include "openreg/sim/runtime.h"
#include "sim_test_util.h"

namespace openreg::sim {
namespace {

using test::make_config;

using test::code_of;
TEST(Memory, AllocationsAreAlignedUsableAndAccounted) {
  Runtime runtime(make_config(2, 1, 1 << 20));
  DeviceMemory& mem = runtime.device(1).memory();
  EXPECT_EQ(mem.capacity(), 1u << 20);
  void* a = mem.allocate(1000);
  void* b = mem.allocate(24);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % DeviceMemory::kAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % DeviceMemory::kAlignment, 0u);
  std::memset(a, 0xab, 1000);
  EXPECT_EQ(mem.allocated(), 1024u);
  EXPECT_EQ(mem.allocation_count(), 2u);
  EXPECT_EQ(mem.peak(), 1024u);
  mem.free(a);
  EXPECT_EQ(mem.allocated(), 24u);
  EXPECT_EQ(mem.peak(), 1024u);
  mem.reset_peak();
  EXPECT_EQ(mem.peak(), 24u);
  mem.free(b);
  EXPECT_EQ(mem.allocated(), 0u);
  EXPECT_EQ(mem.allocation_count(), 0u);
  EXPECT_EQ(mem.allocate(0), nullptr);
  EXPECT_EQ(mem.allocation_count(), 0u);
  mem.free(nullptr);  // a no-op
}

TEST(Memory, OutOfMemoryIsTypedAndMemoryIsUsableAfter) {
  Runtime runtime(make_config(1, 1, 1 << 20));
  DeviceMemory& mem = runtime.device(0).memory();
  void* a = mem.allocate(768 << 10);
  try {
    mem.allocate(512 << 10);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.code(), Errc::kOutOfMemory);
    EXPECT_EQ(e.device(), 0);
    EXPECT_EQ(e.requested(), 512u << 10);
    EXPECT_EQ(e.in_use(), 768u << 10);
    EXPECT_EQ(e.capacity(), 1u << 20);
    EXPECT_EQ(std::string(e.what()),
              "openreg:0 out of memory: tried to allocate 512.00 KiB; 768.00 KiB in use of 1.00 MiB capacity, "
              "256.00 KiB free");
  }
  EXPECT_EQ(mem.allocated(), 768u << 10);  // the failed request accounted nothing
  EXPECT_THROW(mem.allocate(SIZE_MAX), OutOfMemoryError);
  void* b = mem.allocate(256 << 10);  // exactly the rest fits
  mem.free(a);
  mem.free(b);
  void* c = mem.allocate(1 << 20);
  std::memset(c, 1, 1 << 20);
  mem.free(c);
}

TEST(Memory, InvalidFreesAreErrorsNotUndefinedBehaviour) {
  Runtime runtime(make_config(2, 1, 1 << 20));
  DeviceMemory& mem0 = runtime.device(0).memory();
  DeviceMemory& mem1 = runtime.device(1).memory();
  void* p = mem0.allocate(4096);
  int local = 0;
  EXPECT_EQ(code_of([&] { mem0.free(&local); }), Errc::kInvalidPointer);
  EXPECT_EQ(code_of([&] { mem1.free(p); }), Errc::kInvalidPointer);  // another device's pointer
  EXPECT_EQ(code_of([&] { mem0.free(static_cast<char*>(p) + 8); }), Errc::kInvalidPointer);  // interior
  EXPECT_EQ(mem0.allocation_count(), 1u);
  mem0.free(p);
  EXPECT_EQ(code_of([&] { mem0.free(p); }), Errc::kInvalidPointer);  // double free
  EXPECT_EQ(mem0.allocated(), 0u);
}

TEST(Memory, ConcurrentAllocationsNeverExceedCapacity) {
  Runtime runtime(make_config(1, 1, 1 << 20));
  DeviceMemory& mem = runtime.device(0).memory();
  std::vector<std::thread> threads;
  std::atomic<int> ooms{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        try {
          void* p = mem.allocate(100 << 10);
          EXPECT_LE(mem.allocated(), mem.capacity());
          mem.free(p);
        } catch (const OutOfMemoryError&) {
          ooms.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mem.allocated(), 0u);
  EXPECT_LE(mem.peak(), mem.capacity());
}

TEST(Runtime, DeviceOfFindsInteriorPointersOfStartedDevices) {
  Runtime runtime(make_config(3, 1, 1 << 20));
  void* p0 = runtime.device(0).memory().allocate(100);
  void* p2 = runtime.device(2).memory().allocate(300);
  EXPECT_EQ(runtime.device_of(p0), 0);
  EXPECT_EQ(runtime.device_of(static_cast<char*>(p0) + 99), 0);
  EXPECT_EQ(runtime.device_of(static_cast<char*>(p0) + 100), std::nullopt);  // one past the end
  EXPECT_EQ(runtime.device_of(static_cast<char*>(p2) + 150), 2);
  int local = 0;
  EXPECT_EQ(runtime.device_of(&local), std::nullopt);
  EXPECT_EQ(runtime.device_of(nullptr), std::nullopt);
  EXPECT_FALSE(runtime.device_started(1));
  runtime.device(0).memory().free(p0);
  EXPECT_EQ(runtime.device_of(p0), std::nullopt);
  runtime.device(2).memory().free(p2);
}

TEST(Runtime, PinnedHostMemoryIsTracked) {
  Runtime runtime(make_config(1, 1, 1 << 20));
  EXPECT_EQ(runtime.host_alloc_pinned(0), nullptr);
  void* p = runtime.host_alloc_pinned(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % DeviceMemory::kAlignment, 0u);
  std::memset(p, 0, 1000);
  EXPECT_TRUE(runtime.is_pinned(p));
  EXPECT_TRUE(runtime.is_pinned(static_cast<char*>(p) + 999));
  EXPECT_FALSE(runtime.is_pinned(static_cast<char*>(p) + 1000));
  int local = 0;
  EXPECT_FALSE(runtime.is_pinned(&local));
  EXPECT_FALSE(runtime.is_pinned(nullptr));
  EXPECT_EQ(runtime.device_of(p), std::nullopt);  // pinned memory is host memory
  EXPECT_EQ(code_of([&] { runtime.host_free_pinned(&local); }), Errc::kInvalidPointer);
  EXPECT_EQ(code_of([&] { runtime.host_free_pinned(static_cast<char*>(p) + 1); }), Errc::kInvalidPointer);
  runtime.host_free_pinned(p);
  EXPECT_FALSE(runtime.is_pinned(p));
  EXPECT_EQ(code_of([&] { runtime.host_free_pinned(p); }), Errc::kInvalidPointer);
  runtime.host_free_pinned(nullptr);
}

}  // namespace
}  // namespace openreg::sim
