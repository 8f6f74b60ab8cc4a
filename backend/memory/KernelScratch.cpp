// Note [Kernel scratch memory]
// A CPU kernel that openreg runs on a compute thread allocates its temporaries (oneDNN's reordered
// copies, batch norm's buffers) and, when the op's out= form is a wrapper that computes into a new
// tensor and copies, its result, with the CPU allocator. glibc serves a compute thread from an arena of
// its own and, at each free that leaves more than its trim threshold unused at the arena's end, hands
// those pages back to the kernel (madvise): the next kernel's writes fault them in again, zeroed. A
// ResNet-style training step (bench/benchmarks/default_config_bench.py's conv step) took ~2,200-4,200 page
// faults per step on openreg against ~650-1,450 on CPU eager (3,520 per convolution backward against
// 992), and 8-15 ms of system time per step against 2-5.
//
// So while a kernel runs on a compute thread (KernelScratchScope, entered by launch_kernel), its CPU
// allocations of at least kCacheAtLeast bytes come from blocks that earlier kernels freed. openreg
// installs a CPU allocator that forwards everything else, unchanged, to the CPU allocator it replaced:
// CPU eager code, host threads, small sizes, and OpenMP helper threads inside a kernel (they are not
// marked) never see the cache.
//  - A freed block is held for reuse by a request of at least half its size (bounded waste), for at
//    most 2 s unused, and while the held bytes stay under max(64 MiB, physical memory / 16);
//    torch.openreg.empty_cache() frees them all. Held blocks are not device memory: they do not count in
//    memory_allocated (as CPU eager's temporaries do not), only in the process's resident memory.
//  - Blocks come from c10::alloc_cpu, and a DataPtr's context is its data pointer, so the raw
//    interface keeps working: raw_deleter() is the replaced allocator's, and a block given to
//    raw_allocate is freed by it with free_cpu, which is right for an alloc_cpu block (the cache just
//    never sees it again).
//  - A tensor may outlive its kernel (a kernel may cache one) and be freed on any thread: the held
//    blocks and the table of block sizes each have a mutex (never held together); alloc_cpu and
//    free_cpu run outside both. The cache and the allocator are leaked
//    on purpose: storages keep a pointer to their allocator and may be freed during static destruction.

#include "backend/memory/KernelScratch.h"

#include "backend/memory/CacheRegistry.h"
#include "backend/memory/HeldHostBlocks.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

namespace at::openreg {
namespace {

constexpr std::size_t kCacheAtLeast = std::size_t{128} << 10;  // glibc's default mmap threshold

// Whether the calling thread is running a kernel on a compute thread (KernelScratchScope).
thread_local bool tl_in_kernel = false;

void free_block(void* data, std::size_t /*bytes*/) noexcept;

class ScratchCache {
 public:
  //! A block of at least `bytes`: a held one, or a new one from c10::alloc_cpu (which throws when the
  //! system refuses).
  void* take(std::size_t bytes) {
    if (void* held = held_.take(bytes)) return held;
    void* data = c10::alloc_cpu(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    size_of_[data] = bytes;  // overwrites what a block freed through the raw interface left here
    return data;
  }

  //! Takes back a block that `take` returned (its tensor is gone); frees it when the cache is full.
  void give(void* data) noexcept {
    std::size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bytes = size_of_.at(data);
    }
    held_.give(data, bytes);
  }

  //! Frees a block that left the cache for good.
  void free(void* data) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      size_of_.erase(data);
    }
    c10::free_cpu(data);
  }

  void release_all() { held_.release_all(); }

  std::size_t held_bytes() { return held_.held_bytes(); }

 private:
  HeldHostBlocks held_{&free_block};
  std::mutex mutex_;  // guards size_of_
  std::unordered_map<void*, std::size_t> size_of_;  // every block made here and not freed
};

void free_block(void* data, std::size_t /*bytes*/) noexcept { leaked_instance<ScratchCache>().free(data); }

void give_back(void* data) { leaked_instance<ScratchCache>().give(data); }

// The process's CPU allocator once openreg is loaded: kernels' large allocations from the cache,
// everything else from the allocator it replaced.
class KernelScratchAllocator final : public c10::Allocator {
 public:
  explicit KernelScratchAllocator(c10::Allocator* below) : below_(below) {}

  c10::DataPtr allocate(std::size_t bytes) override {
    if (!tl_in_kernel || bytes < kCacheAtLeast) return below_->allocate(bytes);
    void* data = leaked_instance<ScratchCache>().take(bytes);
    return {data, data, &give_back, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return below_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  c10::Allocator* below_;
};

const bool g_installed = [] {
  c10::Allocator* below = c10::GetCPUAllocator();
  static auto* allocator = new KernelScratchAllocator(below);  // leaked: see the Note
  // The replaced allocator's priority (0 unless a library raised it, which then keeps its own).
  c10::SetCPUAllocator(allocator, /*priority=*/0);
  return c10::GetCPUAllocator() == allocator;
}();

}  // namespace

KernelScratchScope::KernelScratchScope() noexcept : outer_(!tl_in_kernel) { tl_in_kernel = true; }

KernelScratchScope::~KernelScratchScope() {
  if (outer_) tl_in_kernel = false;
}

std::size_t kernel_scratch_cached_bytes() { return leaked_instance<ScratchCache>().held_bytes(); }

void kernel_scratch_release_cached() { leaked_instance<ScratchCache>().release_all(); }

namespace {
// Part of torch.openreg.empty_cache() (Note [One registry of releasable caches]).
const bool g_registered = (c10::openreg::register_releasable_cache({"kernel scratch", &kernel_scratch_release_cached}), true);
}  // namespace

}  // namespace at::openreg
