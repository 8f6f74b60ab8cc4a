#include "virtual_clock.h"
#include "openreg/sim/event.h"
#include "openreg/sim/runtime.h"

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <mutex>
#include <variant>
#include <vector>

#include "address_registry.h"
#include "internal_check.h"
#include "openreg/sim/error.h"

namespace openreg::sim {
namespace {

// Note [TBB worker budget]
// Also Note [Elastic device concurrency] and Note [Device lanes] (device.cpp). Every device's lanes
// (compute_threads task arenas of concurrency 1) draw their threads from oneTBB's one worker pool;
// the market hands the pool's workers to the arenas that have work. The pool has a worker for every
// lane of every live runtime, max(cores, live lanes): every device runs its whole compute_threads
// kernels at once whatever the other devices do, as separate GPUs would (kernels on different
// devices that wait on each other, like a hand-written all-reduce spinning on its peers' flags,
// cannot starve each other), and a device whose work waits on another device's work (a kernel or host
// callback synchronizing a peer's stream) always finds a thread for it. Idle workers sleep, and oneTBB
// creates them only when arenas ask for them, so the pool costs threads only for lanes that ran.
// Why not fewer (it was max(cores, largest cap, live devices)): a lane that gets work while every
// worker sits in another lane waits for one to leave that lane, and a worker leaves an arena that ran
// dry only after oneTBB's backoff, a spin that yields the core between probes. On an idle machine that
// is microseconds; beside one CPU-bound process per core each yield hands the core away for a
// scheduler slice. The sim stress test (3 devices x 2 lanes, 3 workers) then spent 360k context
// switches in those yields and took 12 s instead of 0.9 s (tests/support/hang_watch.sh); with a worker
// per lane, 3 s and 27k switches. Kernels that run at once share the cores through their intra-op
// thread counts (backend engine/ExecuteThreads.cpp), which count running kernels, not workers.
// Our arenas reserve no slot for host threads, so all device work runs on workers, and TBB counts the
// master in its limit ("+1"). One global_control, re-created whenever a runtime comes or goes; the new
// control is built before the old one is dropped and TBB applies the smallest live value, so the limit
// never dips below either setting in between.
class WorkerBudget {
 public:
  static WorkerBudget& instance() {
    static WorkerBudget* budget = new WorkerBudget;  // leaked: runtimes may outlive static destructors
    return *budget;
  }
  //! A runtime with `lanes` lanes in all (devices x compute_threads) came (sign +1) or went (sign -1).
  void add(int sign, long lanes) {
    std::lock_guard lock(mutex_);
    lanes_ += sign * lanes;
    const long workers = std::max<long>(tbb::info::default_concurrency(), lanes_);
    auto next = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                      static_cast<std::size_t>(workers + 1));
    control_ = std::move(next);
  }

 private:
  std::mutex mutex_;
  long lanes_ = 0;                                  // live runtimes' lanes; guarded by mutex_
  std::unique_ptr<tbb::global_control> control_;    // guarded by mutex_
};

// A resolved configuration's lanes: one per compute thread of each device (Device's constructor).
long lanes_of(const Config& config) {
  return static_cast<long>(config.device_count) * std::max(1, config.compute_threads);
}

}  // namespace

struct Runtime::State {
  Config config;
  std::vector<std::unique_ptr<Device>> devices;      // slot i written once, inside once[i]
  std::unique_ptr<std::once_flag[]> once;
  std::unique_ptr<std::atomic<Device*>[]> started;  // lock-free view of `devices` for readers
  AddressRegistry pinned;
  std::shared_ptr<VirtualClock> clock;  // records keep weak references  // with a device profile (Note [Virtual time]); before devices go
};

Runtime::Runtime(const Config& config) : s_(std::make_unique<State>()) {
  s_->config = config.resolved();
  const int n = s_->config.device_count;
  s_->devices.resize(n);
  s_->once = std::make_unique<std::once_flag[]>(n);
  s_->started = std::make_unique<std::atomic<Device*>[]>(n);
  for (int i = 0; i < n; ++i) s_->started[i].store(nullptr, std::memory_order_relaxed);
  if (s_->config.device_profile) {
    s_->clock = std::make_shared<VirtualClock>(s_->config.device_profile, s_->config.host_time, n,
                                               s_->config.launch_queue_depth);
  }
  WorkerBudget::instance().add(+1, lanes_of(s_->config));
}

Runtime::~Runtime() {
  for (auto& device : s_->devices) device.reset();  // each waits for its work
  WorkerBudget::instance().add(-1, lanes_of(s_->config));
}

// Note [Teardown at exit]
// The global runtime is never destroyed: tensors freed by static destructors at exit may still reach
// their devices. So nothing would join its threads at exit: a process that returned from main with
// work queued kept running that work on oneTBB workers and copy-engine threads while exit() destroyed
// the static objects the work touches (the program's globals, libtorch's, ours), and whatever had not
// run when the process ended was lost. Instead, for every client (C++ programs, the tests, Python):
//  1. global() registers Runtime::drain_at_exit with std::atexit once the runtime is built. exit()
//     runs atexit handlers and static destructors in the reverse order of their registration and
//     construction, so the drain runs before the destructor of every static object that existed when
//     the runtime started: each library's (oneTBB, libtorch, the backend's load-time registrations)
//     and the program's globals. It waits until all queued work has run, as a CUDA program's queued
//     work completes before it exits.
//  2. What device threads touch and may be built after the runtime (function-local statics: the trace
//     registry, the schedule-fuzz timer, the backend's stream pools, allocator caches, generators,
//     pinned-memory statistics, ...) is leaked, never owned by a static: work that static destructors
//     queue after the drain (a tensor freed at exit) still finds it all alive. A static a program
//     builds after the runtime started and that its queued work uses is destroyed before the drain:
//     such a program synchronizes before it returns from main.
//  3. An interpreter finalizes before exit() runs the drain, so the Python package calls
//     drain_at_exit() from its own atexit hook (python/torch_openreg/_registration.py): no device work
//     runs while Python tears down.
// The drain skips a forked child: its copy of the runtime has queued work but none of the threads that
// would run it (the pid is compared, so it needs nobody's fork handler). An exit() from a kernel or a
// host callback cannot wait for the work it is part of; it skips the drain too.
namespace {
// Published once by global(), before the atexit registration that reads it (release/acquire: the
// drain sees the fully built runtime). The pid is written before the release store.
std::atomic<Runtime*> g_global_runtime{nullptr};
pid_t g_global_runtime_pid = 0;
}  // namespace

namespace detail {
bool running_device_work() noexcept;             // stream.cpp
std::uint64_t device_thread_enqueues() noexcept;  // stream.cpp
}  // namespace detail

Runtime& Runtime::global() {
  // Built once; a bad environment is remembered and rethrown on every call. Leaked (Note [Teardown at
  // exit]).
  static const std::variant<Runtime*, ConfigError> instance = []() -> std::variant<Runtime*, ConfigError> {
    Runtime* runtime = nullptr;
    try {
      runtime = new Runtime(Config::from_env());
    } catch (const ConfigError& e) {
      return e;
    }
    g_global_runtime_pid = getpid();
    g_global_runtime.store(runtime, std::memory_order_release);
    // A full atexit table (glibc has none) would only leave exit without the drain: nothing to report.
    (void)std::atexit(&Runtime::drain_at_exit);
    return runtime;
  }();
  if (const auto* error = std::get_if<ConfigError>(&instance)) throw *error;
  return *std::get<Runtime*>(instance);
}

void Runtime::drain_at_exit() noexcept {
  Runtime* runtime = g_global_runtime.load(std::memory_order_acquire);
  if (runtime == nullptr || getpid() != g_global_runtime_pid || detail::running_device_work()) return;
  // Work may queue more work (a kernel or host callback launching onto another stream, perhaps of a
  // device not started yet), so passes repeat until one ends with no item enqueued from a device thread
  // since the pass began: each pass waits for everything enqueued before it, and an item that queued
  // more did so before it completed, so before the pass that waited for it ended. Host threads are not
  // chased: a thread that keeps issuing while the process exits (a Python daemon thread) would keep the
  // drain from ever ending (it did: the exit hung); what it issued before the drain began is drained.
  try {
    for (;;) {
      const std::uint64_t before = detail::device_thread_enqueues();
      for (int i = 0; i < runtime->s_->config.device_count; ++i) {
        if (Device* d = runtime->s_->started[i].load(std::memory_order_acquire)) d->wait_idle();
      }
      if (detail::device_thread_enqueues() == before) return;
    }
  } catch (...) {
    // Out of memory for a list of streams: exit goes on without the drain rather than terminate.
  }
}

const Config& Runtime::config() const noexcept { return s_->config; }
int Runtime::device_count() const noexcept { return s_->config.device_count; }

Device& Runtime::device(int index) {
  if (index < 0 || index >= s_->config.device_count) {
    throw_error(Errc::kInvalidDevice, "invalid device index " + std::to_string(index) + ": openreg has " +
                                          std::to_string(s_->config.device_count) + " device(s)");
  }
  // acquire: pairs with the release below; a non-null pointer means a fully built device.
  if (Device* d = s_->started[index].load(std::memory_order_acquire)) return *d;
  std::call_once(s_->once[index], [&] {
    s_->devices[index].reset(new Device(*this, index));
    s_->started[index].store(s_->devices[index].get(), std::memory_order_release);
  });
  return *s_->devices[index];
}

bool Runtime::device_started(int index) const noexcept {
  if (index < 0 || index >= s_->config.device_count) return false;
  return s_->started[index].load(std::memory_order_acquire) != nullptr;
}

void Runtime::synchronize() {
  std::exception_ptr first;
  for (int i = 0; i < s_->config.device_count; ++i) {
    Device* d = s_->started[i].load(std::memory_order_acquire);
    if (d == nullptr) continue;
    try {
      d->synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

std::optional<int> Runtime::device_of(const void* ptr) const {
  if (ptr == nullptr) return std::nullopt;
  for (int i = 0; i < s_->config.device_count; ++i) {
    Device* d = s_->started[i].load(std::memory_order_acquire);
    if (d != nullptr && d->memory().find(ptr, nullptr, nullptr)) return i;
  }
  return std::nullopt;
}

bool Runtime::holds_values(const void* ptr, std::size_t bytes) const {
  const std::optional<int> d = device_of(ptr);
  // device_of found it started: the acquire load orders this read after the device was built.
  return !d || s_->started[*d].load(std::memory_order_acquire)->memory().holds_values(ptr, bytes);
}

void Runtime::set_holds_values(const void* ptr, std::size_t bytes, bool holds) {
  if (const std::optional<int> d = device_of(ptr)) device(*d).memory().set_holds_values(ptr, bytes, holds);
}

void* Runtime::host_alloc_pinned(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes > SIZE_MAX - DeviceMemory::kAlignment) {
    throw_error(Errc::kInvalidArgument, "pinned allocation of " + std::to_string(bytes) + " bytes is too large");
  }
  const std::size_t rounded = (bytes + DeviceMemory::kAlignment - 1) / DeviceMemory::kAlignment * DeviceMemory::kAlignment;
  void* p = std::aligned_alloc(DeviceMemory::kAlignment, rounded);
  if (p == nullptr) {
    throw_error(Errc::kOutOfMemory, "pinned host allocation of " + format_bytes(bytes) + " failed: the host is out of memory");
  }
  s_->pinned.insert(p, bytes);
  return p;
}

void Runtime::host_free_pinned(void* ptr) {
  if (ptr == nullptr) return;
  if (s_->pinned.erase(ptr) == 0) {
    throw_error(Errc::kInvalidPointer, "free of " + pointer_text(ptr) +
                                           " as pinned host memory: not a live pinned allocation (foreign pointer, "
                                           "interior pointer or double free)");
  }
  std::free(ptr);
}

bool Runtime::is_pinned(const void* ptr) const { return ptr != nullptr && s_->pinned.find(ptr, nullptr, nullptr); }

const DeviceProfile* Runtime::profile() const noexcept { return s_->config.device_profile.get(); }

std::int64_t Runtime::virtual_now_ns() { return s_->clock ? s_->clock->host_now() : 0; }

DeviceTimeStats Runtime::device_time_stats(int index) {
  device(index);  // throws for bad indices
  return s_->clock ? s_->clock->stats(index) : DeviceTimeStats{};
}

VirtualClock* Runtime::virtual_clock() const noexcept { return s_->clock.get(); }

void Runtime::place_communication(int index, std::int64_t start_ns, std::int64_t end_ns, HostRecord* end) {
  device(index);  // throws for bad indices
  if (!s_->clock) return;
  if (start_ns < 0 || end_ns < start_ns) {
    throw_error(Errc::kInvalidArgument, "place_communication: the span [" + std::to_string(start_ns) + ", " +
                                         std::to_string(end_ns) + ") is not a virtual time span");
  }
  const std::int64_t origin = s_->clock->origin_ns();
  s_->clock->place_communication(index, origin + start_ns, origin + end_ns);
  if (end != nullptr) end->set_virtual_span(origin + start_ns, origin + end_ns, s_->clock);
}

GraphLaunchScope::GraphLaunchScope() {
  if (VirtualClock* clock = Runtime::global().virtual_clock()) clock->begin_graph_launch();
}

GraphLaunchScope::~GraphLaunchScope() {
  if (VirtualClock* clock = Runtime::global().virtual_clock()) clock->end_graph_launch();
}

}  // namespace openreg::sim
