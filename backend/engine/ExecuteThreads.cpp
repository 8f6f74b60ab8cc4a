#include "backend/engine/ExecuteThreads.h"

#include "backend/runtime/Device.h"

#include <openreg/sim/device.h>

#include <ATen/Parallel.h>

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>

namespace at::openreg {
namespace {

// Note [A kernel's team is decided at issue]
// ATen's CPU kernels split their work into as many chunks as their OpenMP team has threads, and a
// reduction adds up its chunks' partial results in that grouping: a sum or mean over many elements,
// layer norm's weight and bias gradients, a BLAS product split along K give other last bits for another
// team size. A kernel's team was once sized when it started, from the kernels running at that instant,
// the devices that had run one in the last 2 ms and whether the issuing host slept: under load or
// schedule fuzzing the same seeded training step then gave another loss in 1 run of 10
// (7.042246341705322 vs 7.042245864868164). CPU eager gives one result per thread count, and so does
// openreg now: the team is decided when the kernel is issued, on the issuing thread, from the
// program's own calls (team_at_issue), and travels with the kernel (a graph's kernel keeps its
// capture's). What it counts:
//  - the kernel itself: a long one (kLongKernelWork) may take every core, a short one every core but
//    the issuing host's (Note [The issuing host keeps a core]);
//  - the streams of its device that share the device: each stream that had a kernel issued among the
//    device's last kStreamWindow kernels (the device's cap is split between them);
//  - the devices that share the machine: every device on which the process has issued a kernel (Note
//    [Devices that share the cores]).
// So the same program issuing from one thread (or from threads the program orders, as autograd's one
// thread per device is ordered with the caller) gets the same team for each kernel on every run,
// whatever the load, the core the host happens to sleep on, or the fuzz seed. The price: a kernel that
// starts while the host sleeps no longer takes the host's core (unless it is long), and a program that
// once used a second device splits the machine with it from then on.

// Note [Devices that share the cores]
// Devices' kernels share the machine's cores (the arenas share oneTBB's worker pool: Note [Elastic
// device concurrency] in sim/src/device.cpp). A kernel that took every core whenever the other device
// happened to be between two kernels ran a core short once the other device's next kernel arrived: one
// OpenMP thread preempted by the other device's kernel holds up its whole team at the next barrier. So
// every device the process has used counts as sharing the machine.

// Issue-order state, per device. Relaxed: it only sizes teams and orders no memory; with one issuing
// thread per device it is read and written in program order, which is what makes teams repeatable.
constexpr int kTrackedStreams = 4;
constexpr std::uint64_t kStreamWindow = 8;  // kernels
constexpr std::int64_t kNoStream = -1;

struct DeviceIssues {
  std::atomic<std::uint64_t> issued{0};
  std::array<std::atomic<std::int64_t>, kTrackedStreams> stream{};
  std::array<std::atomic<std::uint64_t>, kTrackedStreams> at{};  // `issued` at the stream's last kernel
  DeviceIssues() {
    for (auto& s : stream) s.store(kNoStream, std::memory_order_relaxed);
  }
};
DeviceIssues g_issues[c10::openreg::kMaxDevices];
std::atomic<std::uint64_t> g_devices_used{0};  // bit d: a kernel was issued on device d
static_assert(c10::openreg::kMaxDevices <= 64, "one bit per device");

// The streams of `d` that had a kernel issued among its last kStreamWindow kernels, this one (on
// `stream`) included.
int streams_sharing(DeviceIssues& d, std::int64_t stream) noexcept {
  const std::uint64_t now = d.issued.fetch_add(1, std::memory_order_relaxed) + 1;
  int slot = -1;
  int oldest = 0;
  for (int i = 0; i < kTrackedStreams; ++i) {
    if (d.stream[i].load(std::memory_order_relaxed) == stream) slot = i;
    if (d.at[i].load(std::memory_order_relaxed) < d.at[oldest].load(std::memory_order_relaxed)) oldest = i;
  }
  if (slot < 0) {
    slot = oldest;
    d.stream[slot].store(stream, std::memory_order_relaxed);
  }
  d.at[slot].store(now, std::memory_order_relaxed);
  int sharing = 0;
  for (int i = 0; i < kTrackedStreams; ++i) {
    sharing += d.stream[i].load(std::memory_order_relaxed) != kNoStream &&
               now - d.at[i].load(std::memory_order_relaxed) < kStreamWindow;
  }
  return std::max(sharing, 1);
}

// The cores this process may run on: what all devices' kernels share (Note [Elastic device
// concurrency] in sim/src/device.cpp).
int machine_cores() {
  static const int cores = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return 1;
  }();
  return cores;
}

// Note [The issuing host keeps a core]
// On a GPU the host thread that issues a program's ops runs on a core of its own while the device
// computes. Here the device computes on the host's cores, so a kernel leaves the issuing host one
// core. Before this, a kernel got an OpenMP team of every core while the host issued the next ops:
// three busy threads on two cores. The scheduler then preempts one team thread, and the whole team
// waits for it at the next barrier; a host-bound program such as a model's generate() fell into a
// slow mode that made one process 4x slower than the next. Except a long kernel (kLongKernelWork, as
// the kernel estimates its own work: a matrix product's multiply-adds): a user who times one large
// matmul and then synchronizes issues it on the way to the wait, and one thread short it would take
// twice as long as on CPU eager. A long kernel takes every core: the host soon sleeps, and until then
// its burst preempts a team thread for no longer than the burst. The team no longer grows while the
// host sleeps: whether it sleeps when a kernel starts is the machine's timing, not the program's
// (Note [A kernel's team is decided at issue]).
int kernel_cores(bool long_kernel) noexcept {
  const int cores = machine_cores();
  return long_kernel ? cores : std::max(1, cores - 1);
}

using SetThreadsFn = void (*)(int);
// MKL_Set_Num_Threads_Local is the C entry point (mkl_set_num_threads_local is a macro for it; the
// exported lowercase symbol is the Fortran one, which takes a pointer). Returns the previous value.
using SetLocalThreadsFn = int (*)(int);

// Resolved from the libraries torch already loaded (its libgomp and the MKL inside libtorch_cpu),
// so we change the very settings ATen reads and never load a second OpenMP runtime. Null when torch
// was built without them; then kernels keep ATen's setting.
// omp_pause_resource_all(omp_pause_soft): the calling thread's OpenMP team threads exit.
using PauseFn = int (*)(int);
using GetThreadsFn = int (*)();
constexpr int kOmpPauseSoft = 1;

struct ThreadSetters {
  SetThreadsFn omp = reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  SetLocalThreadsFn mkl_local = reinterpret_cast<SetLocalThreadsFn>(dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
  PauseFn omp_pause = reinterpret_cast<PauseFn>(dlsym(RTLD_DEFAULT, "omp_pause_resource_all"));
  GetThreadsFn omp_get = reinterpret_cast<GetThreadsFn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
};

const ThreadSetters& setters() {
  static const ThreadSetters s;
  return s;
}

// Whether this compute thread may own an OpenMP team (it gave a kernel more than one thread since the
// team was last released).
thread_local bool tl_may_own_team = false;

// Note [OpenMP teams of compute threads]
// Each thread that opens an OpenMP parallel region with more than one thread becomes the master of
// its own team, whose threads stay alive after the region. libgomp counts every such thread, and once
// the process has more of them than cores it cuts every team's spin-wait short: the CPU-eager
// thread's team then sleeps between regions and pays a futex wake per op (a 32x32 mm on CPU went
// from 6 us to 30 us once any device kernel had run in parallel). So a compute thread releases its
// team when it leaves its device's arena (the sim's idle hook: its device has no more work for it),
// which keeps the team for back-to-back kernels and leaves none behind while devices are idle.
void release_team() noexcept {
  if (!tl_may_own_team) return;
  tl_may_own_team = false;
  if (setters().omp_pause != nullptr) setters().omp_pause(kOmpPauseSoft);
}

const bool g_hook_installed = [] {
  ::openreg::sim::set_compute_thread_idle_hook(&release_team);
  return true;
}();

void set_thread_count(int n) {
  if (n > 1) tl_may_own_team = true;
  // ATen initializes a thread's count lazily, on its first parallel region, from the process-wide
  // torch.set_num_threads value; do that first so it cannot overwrite our share afterwards.
  at::internal::lazy_init_num_threads();
  thread_local int current = 0;
  if (current == n) return;
  current = n;
  if (setters().omp != nullptr) setters().omp(n);
  if (setters().mkl_local != nullptr) setters().mkl_local(n);
}

}  // namespace

int team_at_issue(int device, std::int64_t stream, int compute_threads, bool long_kernel) noexcept {
  const int d = device >= 0 && device < c10::openreg::kMaxDevices ? device : 0;
  const int streams = streams_sharing(g_issues[d], stream);
  const std::uint64_t bit = std::uint64_t{1} << d;
  const std::uint64_t used = g_devices_used.fetch_or(bit, std::memory_order_relaxed) | bit;
  const int devices = std::popcount(used);
  // The device's cap split between its streams, and the machine split between them and the other
  // devices, less the issuing host's core for a short kernel.
  return std::max(1, std::min(compute_threads / streams, kernel_cores(long_kernel) / (streams + devices - 1)));
}

IntraOpThreadsScope::IntraOpThreadsScope(int threads) : threads_(std::max(1, threads)) { set_thread_count(threads_); }

// Note [Host threads open no OpenMP teams]
// The host runs CPU kernels on stand-ins to learn about an op: the coverage probe (engine/OpCoverage.cpp)
// and the shape pass on scratch data (ShapePass.cpp). Run with the thread's usual OpenMP count, a
// probe on a large tensor opened a team on the main thread, and a probe during backward one on the
// autograd thread. Those teams outlive the call, and libgomp counts their threads against the cores
// (Note [OpenMP teams of compute threads]): from the first backward on, the process had more OpenMP
// threads than cores, so every team, the device's and CPU eager's alike, slept at every barrier. Such
// kernels are tiny or run once per op signature, so one thread costs nothing.
SerialHostKernelScope::SerialHostKernelScope() {
  at::internal::lazy_init_num_threads();  // so ATen's lazy init cannot override the 1 below
  previous_omp_ = setters().omp_get != nullptr ? setters().omp_get() : 1;
  if (setters().omp != nullptr) setters().omp(1);
  previous_mkl_ = setters().mkl_local != nullptr ? setters().mkl_local(1) : 0;
}

SerialHostKernelScope::~SerialHostKernelScope() {
  if (setters().omp != nullptr) setters().omp(previous_omp_);
  if (setters().mkl_local != nullptr) setters().mkl_local(previous_mkl_);
}


}  // namespace at::openreg
