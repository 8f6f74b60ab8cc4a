// Note [Kernel scratch memory]: large CPU allocations of kernels on compute threads are recycled, and
// nothing else is: CPU eager code, small sizes and the raw interface behave as with the CPU allocator.

#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"
#include "backend/memory/KernelScratch.h"
#include "backend/engine/Launch.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace {

const bool g_env = [] {
  setenv("OPENREG_DEVICE_COUNT", "1", 1);
  return true;
}();

using at::openreg::KernelScratchScope;
using at::openreg::kernel_scratch_cached_bytes;
using at::openreg::kernel_scratch_release_cached;

constexpr std::size_t kLarge = std::size_t{1} << 20;

TEST(KernelScratch, AKernelsFreedBlockServesTheNextKernel) {
  kernel_scratch_release_cached();
  void* first = nullptr;
  {
    KernelScratchScope kernel;
    c10::DataPtr block = c10::GetCPUAllocator()->allocate(kLarge);
    first = block.get();
    static_cast<char*>(block.get())[kLarge - 1] = 1;  // the memory is usable
  }
  EXPECT_EQ(kernel_scratch_cached_bytes(), kLarge);
  {
    KernelScratchScope kernel;
    c10::DataPtr again = c10::GetCPUAllocator()->allocate(kLarge - 100);  // best fit, within half
    EXPECT_EQ(again.get(), first);
    EXPECT_EQ(kernel_scratch_cached_bytes(), 0u);
  }
  kernel_scratch_release_cached();
  EXPECT_EQ(kernel_scratch_cached_bytes(), 0u);
}

TEST(KernelScratch, HostCodeAndSmallSizesNeverUseTheCache) {
  kernel_scratch_release_cached();
  {
    c10::DataPtr host = c10::GetCPUAllocator()->allocate(kLarge);  // no kernel running here
  }
  EXPECT_EQ(kernel_scratch_cached_bytes(), 0u);
  {
    KernelScratchScope kernel;
    c10::DataPtr small = c10::GetCPUAllocator()->allocate(1024);
  }
  EXPECT_EQ(kernel_scratch_cached_bytes(), 0u);
  // A host tensor freed while blocks are held is not given one of them.
  {
    KernelScratchScope kernel;
    c10::DataPtr block = c10::GetCPUAllocator()->allocate(kLarge);
  }
  ASSERT_EQ(kernel_scratch_cached_bytes(), kLarge);
  at::Tensor host = at::empty({static_cast<int64_t>(kLarge / 4)}, at::kFloat);
  EXPECT_EQ(kernel_scratch_cached_bytes(), kLarge);
  kernel_scratch_release_cached();
}

TEST(KernelScratch, TheRawInterfaceStillWorksInsideAKernel) {
  c10::Allocator* cpu = c10::GetCPUAllocator();
  ASSERT_NE(cpu->raw_deleter(), nullptr);
  KernelScratchScope kernel;
  void* raw = cpu->raw_allocate(kLarge);  // asserts that the context is the data pointer
  static_cast<char*>(raw)[0] = 1;
  cpu->raw_deallocate(raw);
}

TEST(KernelScratch, KernelsLaunchedOnAStreamRecycleTheirAllocations) {
  kernel_scratch_release_cached();
  const c10::openreg::OpenRegStream stream = c10::openreg::current_openreg_stream(0);
  void* seen[2] = {nullptr, nullptr};
  for (void*& slot : seen) {
    at::openreg::launch_kernel(stream, "allocates", [&slot] {
      at::Tensor temp = at::empty({static_cast<int64_t>(kLarge / 4)}, at::kFloat);  // a kernel's temporary
      temp.fill_(1);
      slot = temp.data_ptr();
    });
  }
  c10::openreg::synchronize_device(0);
  EXPECT_EQ(seen[0], seen[1]) << "the second kernel did not get the first one's freed block";
  EXPECT_EQ(kernel_scratch_cached_bytes(), kLarge);
  kernel_scratch_release_cached();
  EXPECT_EQ(kernel_scratch_cached_bytes(), 0u);
}

}  // namespace
