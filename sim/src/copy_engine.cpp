#include "copy_engine.h"


#ifdef __linux__
#include <fcntl.h>
#include <sys/mman.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <atomic>
#include <cerrno>
#include <ctime>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "openreg/sim/stream.h"
#include "openreg/sim/trace.h"
#include "trace_recorder.h"
#include "tsan_annotations.h"
#include "work_item.h"

namespace openreg::sim {
namespace {

// Note [Fresh host destinations]
// A device-to-host copy usually lands in memory the program has just allocated (`.cpu()`, `.to("cpu")`):
// a large buffer that glibc maps fresh and the kernel has not backed with pages yet. A plain memcpy
// then takes a page fault per 4 KiB page, each of which traps, allocates a page, zeroes it and returns
// to the copy: that made a 64 MiB `.cpu()` 5x slower than the same bytes host-to-device, whose
// destination (device memory) is recycled and already backed. A DMA engine writes such memory at full
// speed; we approach it two ways, for the destination's page-aligned interior (the unaligned head and
// tail are memcpy'd):
//  1. Huge pages first: the 2 MiB-aligned part gets MADV_HUGEPAGE and is copied chunk by chunk, one
//     fault per 2 MiB (512x fewer). That is the fastest path when the kernel has free huge pages at
//     hand, and very slow when it has not: with THP defrag at "madvise" the fault then compacts memory,
//     and in a VM that hands free huge pages back to its host (virtio-balloon free page reporting) it
//     refaults them from the host: ~4.5 ms per 2 MiB, a 64 MiB copy ~145 ms instead of ~11 ms. So a
//     chunk that costs more than kSlowHugePageNs of CPU ends the attempt, and the next
//     kHugePageRetryEvery - 1 copies skip it.
//  2. Otherwise userfaultfd's UFFDIO_COPY: the kernel allocates each missing 4 KiB page already filled
//     with the source bytes (no trap, no zeroing), all in one system call: about 2x faster than
//     faulting the pages in, or than MADV_POPULATE_WRITE and a memcpy.
// Either way every byte of the destination is written, nothing outside it, and the memory stays
// ordinary anonymous (or shmem) memory: only its advice changes, as with a CPU allocator that enables
// THP, and pages already backed are simply memcpy'd over.
//  - UFFDIO_COPY fills from the first page up to the first one already backed (EEXIST); memcpy does the
//    rest. The range is registered with the userfaultfd only for the copy. Any refusal (no userfaultfd
//    in this kernel or container, a file-backed or hugetlb mapping, a range another userfaultfd owns)
//    leaves the plain memcpy. UFFD_USER_MODE_ONLY needs no privilege (Linux 5.11+). A thread touching
//    the destination during the copy (a data race in the program anyway) waits for the copy of that
//    page or for the unregistration, which wakes it; it is never left blocked.
//  - The userfaultfd belongs to the process that created it (its address space), so a forked child
//    opens its own instead of using its parent's.
//  - ThreadSanitizer builds keep memcpy: the kernel's writes would be invisible to TSAN.
constexpr std::size_t kFillAtLeast = std::size_t{1} << 20;  // below this a plain memcpy is as fast
constexpr std::size_t kHugePage = std::size_t{2} << 20;
// A huge-page chunk whose fault and copy take longer than this (thread CPU time, so preemption does
// not count) ran into the slow case below; 2 MiB in 1 ms is slower than filling 4 KiB pages.
constexpr std::int64_t kSlowHugePageNs = 1'000'000;

#if defined(__linux__) && !defined(OPENREG_SIM_TSAN) && defined(UFFD_USER_MODE_ONLY)
#define OPENREG_FILL_WITH_USERFAULTFD 1
#endif

#ifdef OPENREG_FILL_WITH_USERFAULTFD
// The process's userfaultfd, opened on first use; -1 where the kernel refuses one (then never asked
// again by this process).
class FreshPageFiller {
 public:
  static FreshPageFiller& instance() {
    // Leaked: copy-engine threads use it and may run during static destruction (Note [Teardown at exit]).
    static auto* filler = new FreshPageFiller;
    return *filler;
  }

  // Fills the not yet backed pages of [dst, dst + bytes) (page-aligned) from src, from the first page
  // up to the first page that is already backed or cannot be filled; returns how many bytes it wrote.
  std::size_t fill(char* dst, const char* src, std::size_t bytes) {
    const int fd = fd_for_this_process();
    if (fd < 0) return 0;
    uffdio_register reg{};
    reg.range.start = reinterpret_cast<std::uintptr_t>(dst);
    reg.range.len = bytes;
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0) return 0;  // not an anonymous/shmem range we may fill
    std::size_t done = 0;
    while (done < bytes) {
      uffdio_copy copy{};
      copy.dst = reinterpret_cast<std::uintptr_t>(dst + done);
      copy.src = reinterpret_cast<std::uintptr_t>(src + done);
      copy.len = bytes - done;
      if (ioctl(fd, UFFDIO_COPY, &copy) == 0) {
        done = bytes;
        break;
      }
      const int err = errno;
      if (copy.copy > 0) done += static_cast<std::size_t>(copy.copy);
      // EAGAIN: the address space changed under the copy (a concurrent mremap/fork); try again.
      // Anything else (EEXIST: the next page is already backed) ends the fill; memcpy does the rest.
      if (err != EAGAIN) break;
    }
    uffdio_range range{reinterpret_cast<std::uintptr_t>(dst), bytes};
    (void)ioctl(fd, UFFDIO_UNREGISTER, &range);  // also wakes any thread that faulted on the range
    return done;
  }

 private:
  int fd_for_this_process() {
    const pid_t pid = getpid();
    std::lock_guard lock(mutex_);
    if (pid != pid_) {  // first use, or a forked child: the inherited descriptor is the parent's
      if (fd_ >= 0) close(fd_);  // the child's copy of the descriptor; the parent keeps its own
      pid_ = pid;
      fd_ = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
      uffdio_api api{};
      api.api = UFFD_API;
      if (fd_ >= 0 && ioctl(fd_, UFFDIO_API, &api) != 0) {
        close(fd_);
        fd_ = -1;
      }
    }
    return fd_;
  }

  std::mutex mutex_;  // guards fd_ and pid_ (copy engines of all devices share the filler)
  int fd_ = -1;
  pid_t pid_ = 0;
};
#endif

// Copies the page-aligned [dst, dst + bytes): its missing pages filled directly where the kernel lets
// us, the rest memcpy'd.
void fill_or_copy(char* dst, const char* src, std::size_t bytes) {
  std::size_t filled = 0;
#ifdef OPENREG_FILL_WITH_USERFAULTFD
  if (bytes != 0) filled = FreshPageFiller::instance().fill(dst, src, bytes);
#endif
  std::memcpy(dst + filled, src + filled, bytes - filled);
}

#ifdef MADV_HUGEPAGE
std::int64_t thread_cpu_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Copies after a slow huge-page chunk that skip the huge-page attempt (it is retried on every
// kHugePageRetryEvery-th copy, as free huge pages come and go). Relaxed: a heuristic shared by all
// copy engines; a lost update only costs one more or one fewer attempt.
std::atomic<int> g_skip_huge_pages{0};
constexpr int kHugePageRetryEvery = 8;
#endif

// memcpy into host memory, fast for memory the kernel has not backed yet (Note [Fresh host
// destinations]).
void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (bytes < kFillAtLeast) {
    std::memcpy(dst, src, bytes);
    return;
  }
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const auto addr = reinterpret_cast<std::uintptr_t>(d);
  const auto align_up = [&](std::uintptr_t a, std::size_t to) { return (a + to - 1) & ~(to - 1); };
  const auto align_down = [&](std::uintptr_t a, std::size_t to) { return a & ~(to - 1); };
  char* const interior_begin = d + (align_up(addr, page) - addr);
  char* const interior_end = d + (align_down(addr + bytes, page) - addr);
  std::memcpy(d, s, static_cast<std::size_t>(interior_begin - d));
  std::memcpy(interior_end, s + (interior_end - d), static_cast<std::size_t>(d + bytes - interior_end));
  char* pos = interior_begin;
#ifdef MADV_HUGEPAGE
  char* const huge_begin = d + (align_up(addr, kHugePage) - addr);
  char* const huge_end = d + (align_down(addr + bytes, kHugePage) - addr);
  const int skip = g_skip_huge_pages.load(std::memory_order_relaxed);
  if (skip > 0) g_skip_huge_pages.store(skip - 1, std::memory_order_relaxed);
  if (skip == 0 && huge_end > huge_begin &&
      madvise(huge_begin, static_cast<std::size_t>(huge_end - huge_begin), MADV_HUGEPAGE) == 0) {
    fill_or_copy(pos, s + (pos - d), static_cast<std::size_t>(huge_begin - pos));
    pos = huge_begin;
    while (pos < huge_end) {
      const std::int64_t start = thread_cpu_ns();
      std::memcpy(pos, s + (pos - d), kHugePage);
      pos += kHugePage;
      if (thread_cpu_ns() - start > kSlowHugePageNs) {
        g_skip_huge_pages.store(kHugePageRetryEvery - 1, std::memory_order_relaxed);
        break;
      }
    }
  }
#endif
  fill_or_copy(pos, s + (pos - d), static_cast<std::size_t>(interior_end - pos));
}

}  // namespace

CopyEngine::CopyEngine(int device, std::string name, std::uint64_t bandwidth, bool execute)
    : device_(device), name_(std::move(name)), bandwidth_(bandwidth), execute_(execute), thread_([this] { run(); }) {}

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
    if (!execute_ && item.timing_only == TimingOnly::kSkip) {
      // Note [Values in timing-only execution]: what the host reads back of values never computed is
      // zeros; device memory is untouched.
      if (item.host_dst) std::memset(item.dst, 0, item.bytes);
    } else if (item.host_dst) {
      copy_to_host(item.dst, item.src, item.bytes);  // host and device memory never overlap
    } else {
      std::memmove(item.dst, item.src, item.bytes);  // memmove: a same-device copy may overlap
    }
    if (bandwidth_ != 0 && execute_) {
      // The simulated transfer time, slept (not spun) so the engine costs no CPU while "busy".
      const auto duration = std::chrono::nanoseconds(
          static_cast<std::int64_t>(static_cast<long double>(item.bytes) * 1e9L / static_cast<long double>(bandwidth_)));
      std::this_thread::sleep_until(std::chrono::steady_clock::time_point(std::chrono::nanoseconds(start)) + duration);
    }
    if (trace_enabled()) {
      const bool virtual_time = item.vend >= 0;  // Note [Virtual time]
      trace_record({item.name, device_, job.stream->id(), ItemKind::kCopy, virtual_time ? item.vstart : start,
                    virtual_time ? item.vend : now_ns(), item.bytes, item.correlation, item.enqueue_ns});
    }
    // Dispatches the stream's next copies/events from this thread (Note [Dispatching off the
    // device]); may free the stream: touch neither afterwards.
    job.stream->resume_here(job.item);
  }
}

}  // namespace openreg::sim
