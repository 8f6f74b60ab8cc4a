// Note [Recycled host destinations]
// `.cpu()` of a large openreg tensor allocates its result with the CPU allocator. For large sizes
// glibc maps fresh memory each time and unmaps it at free, so every such copy writes into pages the
// kernel must first allocate and zero (Note [Fresh host destinations] in sim/src/copy_engine.cpp makes
// that cheaper, not free) and every free hands them back: a loop that moves a 64 MiB result to the
// host each step paid that at every step, while the same loop's host-to-device copies land in
// recycled device blocks. So aten::_to_copy from openreg to the CPU (backend/ops/ToCopy.cpp) takes its
// result's memory from a small cache of host blocks that earlier results gave back:
//  - Only synchronous copies of at least kRecycleAtLeast bytes into a dense, strided, unpinned result
//    (the common `.cpu()` / `.to("cpu")` / `.to("cpu", dtype)`); everything else takes PyTorch's
//    composite path unchanged. Smaller blocks come from glibc's heap, which already recycles them.
//  - The result is an ordinary CPU tensor: its storage's allocator is HostDestinationAllocator, which
//    serves resizes from the same cache (or the CPU allocator below the threshold); it is not pinned
//    (is_pinned() is false, as for the CPU allocator's memory). The bytes are written by a blocking
//    copy that has finished before the tensor is returned, so a block is never in use by a stream
//    when its tensor frees it: giving it back needs no stream ordering.
//  - A block is reused for a request of at least half its size (bounded waste). At most
//    max(64 MiB, physical memory / 16) is held; a block held longer than 2 s is unmapped at
//    the next allocation or free, and torch.openreg.empty_cache() unmaps all of them.
// Thread-safety: one mutex guards the cache; system calls (mmap/munmap) run outside it. Results may
// be freed on any thread (a host callback can drop the last reference on a device thread). The cache
// is leaked on purpose: tensors can be freed during static destruction at exit.

#include "backend/memory/HostDestinations.h"

#include "backend/memory/CacheRegistry.h"
#include "backend/memory/HeldHostBlocks.h"

#include <c10/core/CPUAllocator.h>

#include <sys/mman.h>

#include <cstring>

namespace at::openreg {
namespace {

constexpr std::size_t kGranule = std::size_t{2} << 20;  // block sizes are multiples of a huge page

std::size_t round_up(std::size_t n) {
  return (n + kGranule - 1) / kGranule * kGranule;
}

// One mapping of `bytes` (a multiple of kGranule) at `base`; the DataPtr context of a result.
struct Block {
  void* base;
  std::size_t bytes;
};

void unmap(void* block, std::size_t /*bytes*/) noexcept {
  auto* b = static_cast<Block*>(block);
  munmap(b->base, b->bytes);
  delete b;
}

class HostDestinationCache {
 public:
  // A block of at least `bytes`, or nullptr when the system refuses the mapping.
  Block* take(std::size_t bytes) {
    const std::size_t want = round_up(bytes);
    if (void* held = held_.take(want)) return static_cast<Block*>(held);
    void* base = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return nullptr;
    return new Block{base, want};
  }

  // Takes `block` back (its tensor is gone); unmaps it when the cache is full.
  void give(Block* block) noexcept { held_.give(block, block->bytes); }

  void release_all() { held_.release_all(); }

  std::size_t held_bytes() { return held_.held_bytes(); }

 private:
  HeldHostBlocks held_{&unmap};
};

void give_back(void* context) {
  leaked_instance<HostDestinationCache>().give(static_cast<Block*>(context));
}

// The allocator of results' storages: large sizes from the cache, small ones from the CPU allocator
// (so a resize of a result behaves as for any CPU tensor).
class HostDestinationAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) override {
    if (bytes >= kRecycleAtLeast) {
      if (Block* b = leaked_instance<HostDestinationCache>().take(bytes)) {
        return {b->base, b, &give_back, c10::Device(c10::DeviceType::CPU)};
      }
    }
    return c10::GetCPUAllocator()->allocate(bytes);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return nullptr;  // contexts differ from data pointers: no raw allocation
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

}  // namespace

std::size_t host_destination_cached_bytes() {
  return leaked_instance<HostDestinationCache>().held_bytes();
}

void host_destination_release_cached() {
  leaked_instance<HostDestinationCache>().release_all();
}

c10::Allocator* host_destination_allocator() {
  static auto* allocator = new HostDestinationAllocator();  // leaked, like the cache
  return allocator;
}

namespace {
// Part of torch.openreg.empty_cache() (Note [One registry of releasable caches]).
const bool g_registered =
    (c10::openreg::register_releasable_cache({"host destinations", &host_destination_release_cached}), true);
}  // namespace

}  // namespace at::openreg
