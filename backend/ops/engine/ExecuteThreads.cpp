#include "backend/ops/engine/ExecuteThreads.h"

#include "backend/runtime/Device.h"

#include <openreg/sim/device.h>
#include <openreg/sim/host_wait.h>

#include <ATen/Parallel.h>

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace at::openreg {
namespace {

// Kernels currently running, per device. Relaxed: the counts only size
// thread shares, they order no memory, and a momentarily stale value merely gives one kernel a
// slightly different share.
std::atomic<int> g_running[c10::openreg::kMaxDevices];

// Note [Devices that share the cores]
// When the last kernel of each device ended (steady clock, ns; 0: never). A kernel sized only from the
// kernels running at its start took every core whenever the other device happened to be between two
// kernels; in a data-parallel step that is most of the time at some instant, so each device's kernels
// kept switching between one thread and a team of all cores, and a team that started while the other
// device's next kernel arrived ran a core short: one OpenMP thread preempted by the other device's
// kernel holds up its whole team at the next barrier. So a device whose kernels ran within the last
// kSharingWindow counts as sharing the machine even between its kernels. A program that uses one
// device never marks another, so its kernels keep the whole machine. Relaxed, as the counts above.
std::atomic<std::int64_t> g_last_end_ns[c10::openreg::kMaxDevices];
constexpr std::int64_t kSharingWindowNs = 2'000'000;

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The kernels that share the machine with one starting on `device`, where `running` kernels run now
// (itself included): those, each kernel running on another device, and one for every other device
// that ran a kernel within the sharing window.
int machine_sharers(int device, int running) noexcept {
  const int devices = c10::openreg::device_count();
  const std::int64_t now = now_ns();
  int sharers = running;
  for (int d = 0; d < devices; ++d) {
    if (d == device) continue;
    const int others = g_running[d].load(std::memory_order_relaxed);
    const std::int64_t last = g_last_end_ns[d].load(std::memory_order_relaxed);
    sharers += others > 0 ? others : (last != 0 && now - last < kSharingWindowNs ? 1 : 0);
  }
  return std::max(sharers, 1);
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
// computes. Here the device computes on the host's cores, so kernels leave the issuing host one core
// while it is awake, and take every core while it sleeps waiting for them (Note [Host threads asleep]
// in sim/src/host_wait.cpp: a synchronize, an item(), a full launch queue). Before this, a kernel got
// an OpenMP team of every core while the host issued the next ops: three busy threads on two cores.
// The scheduler then preempts one team thread, and the whole team waits for it at the next barrier;
// a host-bound program such as a model's generate() fell into a slow mode that made one process 4x
// slower than the next. A compute-bound program is hardly affected: its host soon runs ahead and sleeps
// on the launch queue or a synchronize, and every kernel that starts from then on gets every core.
// Only the kernels that start while a host thread is awake run one thread short, and only for that
// kernel (a team's size is fixed when it opens). Except a long one (kLongKernelWork, as the kernel
// estimates its own work: a matrix product's multiply-adds): a user who times one large matmul and then
// synchronizes starts it while the host is still awake, on its way to the wait, and one thread short it
// would take twice as long as on CPU eager. A long kernel takes every core: the host soon sleeps, and
// until then its burst preempts a team thread for no longer than the burst. With several host threads
// issuing at once, one that sleeps makes the count say "asleep" for all: the budget is a hint for the
// usual one issuing thread.
int kernel_cores(bool outlasts_host) noexcept {
  const int cores = machine_cores();
  return outlasts_host || ::openreg::sim::host_threads_asleep() > 0 ? cores : std::max(1, cores - 1);
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

IntraOpThreadsScope::IntraOpThreadsScope(int device, int compute_threads, bool outlasts_host)
    : device_(device >= 0 && device < c10::openreg::kMaxDevices ? device : 0) {
  const int running = g_running[device_].fetch_add(1, std::memory_order_relaxed) + 1;
  // The device's cap split between its running kernels, and the machine split between the kernels and
  // devices that share it (Note [Devices that share the cores]: the arenas share the cores
  // elastically, so a device's cap is not its own) less the issuing host's core (Note [The issuing host
  // keeps a core]).
  threads_ = std::max(
      1, std::min(compute_threads / running, kernel_cores(outlasts_host) / machine_sharers(device_, running)));
  set_thread_count(threads_);
}

// Note [Host threads open no OpenMP teams]
// The host runs CPU kernels on stand-ins to learn about an op: the coverage probe (ops/engine/OpCoverage.cpp)
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

IntraOpThreadsScope::~IntraOpThreadsScope() {
  g_last_end_ns[device_].store(now_ns(), std::memory_order_relaxed);
  g_running[device_].fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace at::openreg
