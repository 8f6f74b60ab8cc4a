#include "backend/ops/ExecuteThreads.h"

#include "backend/OpenRegRuntime.h"  // sim::set_compute_thread_idle_hook

#include <ATen/Parallel.h>

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <atomic>

namespace at::openreg {
namespace {


// Kernels currently running, per device and on all devices together. Relaxed: the counts only size
// thread shares, they order no memory, and a momentarily stale value merely gives one kernel a
// slightly different share.
std::atomic<int> g_running[c10::openreg::kMaxDevices];
std::atomic<int> g_running_all{0};

// The cores this process may run on: what all devices' kernels share (Note [Elastic device
// concurrency] in sim/src/device.cpp: the arenas share one worker pool of that size).
int machine_cores() {
  static const int cores = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return 1;
  }();
  return cores;
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
constexpr int kOmpPauseSoft = 1;

struct ThreadSetters {
  SetThreadsFn omp = reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  SetLocalThreadsFn mkl_local = reinterpret_cast<SetLocalThreadsFn>(dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
  PauseFn omp_pause = reinterpret_cast<PauseFn>(dlsym(RTLD_DEFAULT, "omp_pause_resource_all"));
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

IntraOpThreadsScope::IntraOpThreadsScope(int device, int compute_threads)
    : device_(device >= 0 && device < c10::openreg::kMaxDevices ? device : 0) {
  const int running = g_running[device_].fetch_add(1, std::memory_order_relaxed) + 1;
  const int running_all = g_running_all.fetch_add(1, std::memory_order_relaxed) + 1;
  // The device's cap split between its running kernels, and the machine split between all devices'
  // running kernels: the arenas share the cores elastically, so a device's cap is not its own.
  threads_ = std::max(1, std::min(compute_threads / running, machine_cores() / running_all));
  set_thread_count(threads_);
}

IntraOpThreadsScope::~IntraOpThreadsScope() {
  g_running_all.fetch_sub(1, std::memory_order_relaxed);
  g_running[device_].fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace at::openreg
