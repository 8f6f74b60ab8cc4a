#include "copy_engine.h"

#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstring>

#include "openreg/sim/stream.h"
#include "openreg/sim/trace.h"
#include "trace_recorder.h"
#include "work_item.h"

namespace openreg::sim {
namespace {

// Note [Fresh host destinations]
// A device-to-host copy usually lands in memory the program has just allocated (`.cpu()`, `.to("cpu")`):
// a large buffer that glibc maps fresh and the kernel has not backed with pages yet, so the copy
// takes one page fault (and a 4 KiB zeroing) per page, which made a 64 MiB `.cpu()` ~5x slower than
// the same bytes host-to-device (device memory is recycled, already backed). A DMA engine writes such
// memory at full speed; we approach it by asking for transparent huge pages on the destination's
// whole 2 MiB-aligned interior before the memmove: 512x fewer faults. Only the advice changes (as a
// CPU allocator with THP enabled does): contents and what the program may do with the memory do
// not, pages already backed are not touched, and an advice the kernel refuses (THP off, range not
// mapped by mmap) just leaves the plain path.
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kAdviseAtLeast = 4 * kHugePage;

void advise_huge_pages(void* dst, std::size_t bytes) {
#ifdef MADV_HUGEPAGE
  if (bytes < kAdviseAtLeast) return;
  const auto begin = (reinterpret_cast<std::uintptr_t>(dst) + kHugePage - 1) & ~(kHugePage - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(dst) + bytes) & ~(kHugePage - 1);
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)dst;
  (void)bytes;
#endif
}

}  // namespace

CopyEngine::CopyEngine(int device, std::string name, std::uint64_t bandwidth)
    : device_(device), name_(std::move(name)), bandwidth_(bandwidth), thread_([this] { run(); }) {}

CopyEngine::~CopyEngine() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void CopyEngine::submit(Stream& stream, WorkItem* item) {
  std::lock_guard lock(mutex_);
  jobs_.push_back({&stream, item});
  // Under the lock: once the engine can run the copy, the device may finish all its work and destroy
  // this engine, so the caller must be done with it by then (the engine needs the lock to proceed).
  cv_.notify_one();
}

void CopyEngine::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_ and drained: every submitted copy has completed
      job = jobs_.front();
      jobs_.pop_front();
    }
    WorkItem& item = *job.item;
    const std::int64_t start = now_ns();
    if (item.host_dst) advise_huge_pages(item.dst, item.bytes);
    std::memmove(item.dst, item.src, item.bytes);  // memmove: a same-device copy may overlap
    if (bandwidth_ != 0) {
      // The simulated transfer time, slept (not spun) so the engine costs no CPU while "busy".
      const auto duration = std::chrono::nanoseconds(
          static_cast<std::int64_t>(static_cast<long double>(item.bytes) * 1e9L / static_cast<long double>(bandwidth_)));
      std::this_thread::sleep_until(std::chrono::steady_clock::time_point(std::chrono::nanoseconds(start)) + duration);
    }
    if (trace_enabled()) {
      trace_record({item.name, device_, job.stream->id(), ItemKind::kCopy, start, now_ns(), item.bytes,
                    item.correlation, item.enqueue_ns});
    }
    // Dispatches the stream's next copies/events from this thread (Note [Dispatching off the
    // device]); may free the stream: touch neither afterwards.
    job.stream->resume_here(job.item);
  }
}

}  // namespace openreg::sim
