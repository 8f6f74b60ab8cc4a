#pragma once
// Note [Launching a kernel on a stream]
// Ops reach a stream's work queue only through this header: launch_kernel for kernels, launch_copy for
// byte copies on the stream's copy engine, keep_until_done for host memory a copy
// uses. Every kernel path (the async path's work items, the fast kernels, copies, fill_) enqueues its kernel
// through launch_kernel, which owns what every kernel needs on the device thread:
//  - its intra-op team (IntraOpThreadsScope, engine/ExecuteThreads.h), decided on the host when the
//    kernel is issued, so that its results do not depend on the machine's timing (team_at_issue);
//  - recycled memory for its large CPU allocations (KernelScratchScope, Note [Kernel scratch memory]
//    in memory/KernelScratch.cpp);
//  - the error policy: a kernel's exception is kept by the stream and raised, with the item's name,
//    at the next synchronization. c10::Error::what() carries a C++ backtrace that means nothing to
//    the Python user who reads it there, so a c10::Error is re-thrown as a plain std::runtime_error
//    holding the message alone;
//  - the translation of sim errors of the launch itself (Note [Sim errors cross into PyTorch once]).
// The wrapper adds 8 bytes to the kernel's closure; the hot paths' items are sized so that the whole
// travels inline in the sim::Task (kTravelsInline): no allocation per launch.
//
// Thread-safety: launch_kernel may be called from any host thread; the kernel runs on one device
// thread, after everything enqueued on the stream before it.

#include "backend/runtime/Capture.h"
#include "backend/runtime/SimErrors.h"
#include "backend/runtime/Stream.h"
#include "backend/engine/ExecuteThreads.h"
#include "backend/memory/KernelScratch.h"

#include <c10/util/Exception.h>

#include <openreg/sim/cost.h>
#include <openreg/sim/device.h>
#include <openreg/sim/runtime.h>
#include <openreg/sim/stream.h>
#include <openreg/sim/task.h>
#include <openreg/sim/timing_only.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace at::openreg {

//! Whether kernel type K estimates its work: `std::int64_t work() const`, in multiply-adds (a kernel
//! that does not is sized as a short one: Note [The issuing host keeps a core] in ExecuteThreads.cpp).
template <typename K, typename = void>
struct HasWork : std::false_type {};
template <typename K>
struct HasWork<K, std::void_t<decltype(std::declval<const K&>().work())>> : std::true_type {};

//! Whether `kernel` runs long enough to take the issuing host's core too.
template <typename K>
bool outlasts_host(const K& kernel) {
  if constexpr (HasWork<K>::value) {
    return kernel.work() >= kLongKernelWork;
  } else {
    return false;
  }
}

//! A kernel as the stream runs it: the intra-op threads scope and the error policy around the closure.
template <typename Kernel>
struct LaunchedKernel {
  Kernel kernel;
  std::int32_t threads;  // its team, decided at issue (team_at_issue)

  void operator()() {
    try {
      IntraOpThreadsScope team(threads);
      KernelScratchScope scratch;
      kernel();
    } catch (const c10::Error& e) {
      throw std::runtime_error(e.what_without_backtrace());
    }
  }
};

//! Whether a kernel closure of type `Kernel` travels inline in the stream's task (no allocation per
//! launch): the hot paths' items assert it.
template <typename Kernel>
inline constexpr bool kTravelsInline = sizeof(LaunchedKernel<Kernel>) <= ::openreg::sim::Task::kInlineBytes &&
                                       alignof(LaunchedKernel<Kernel>) <= alignof(std::max_align_t) &&
                                       std::is_nothrow_move_constructible_v<LaunchedKernel<Kernel>>;

//! Whether the process's runtime has a device profile (virtual time): fixed when it starts, read here
//! once, so a launch without one pays a load and a branch, not three calls into the sim library.
inline bool virtual_time_on() {
  static const bool on = ::openreg::sim::Runtime::global().profile() != nullptr;
  return on;
}

//! Whether kernels are only timed, not run (OPENREG_EXECUTE=timing; Note [Timing-only execution] in
//! sim/src/stream.cpp): fixed when the runtime starts.
inline bool timing_only_on() {
  static const bool on = ::openreg::sim::Runtime::global().config().execute == ::openreg::sim::ExecuteMode::kTiming;
  return on;
}

//! Whether kernel type K carries a seed (a random op's work item): a replay gives it a new one.
template <typename K, typename = void>
struct HasSeed : std::false_type {};
template <typename K>
struct HasSeed<K, std::void_t<decltype(std::declval<K&>().seed)>> : std::true_type {};

//! Records `launched` into the capture of `stream`, which captures (Note [Stream capture] in
//! runtime/Capture.cpp); launches it after all if the capture ended meanwhile.
template <typename K, typename CostFn>
void capture_kernel(const c10::openreg::OpenRegStream& stream, const char* name, LaunchedKernel<K>&& launched,
                    CostFn& cost, const c10::openreg::capture::SeedSource* seed) {
  if constexpr (!std::is_copy_constructible_v<K>) {
    c10::openreg::capture::check_not_capturing(stream, name);  // throws: the kernel cannot be replayed
  } else {
    std::optional<::openreg::sim::KernelCost> kernel_cost;
    if constexpr (!std::is_same_v<std::decay_t<CostFn>, std::nullptr_t>) {
      if (virtual_time_on()) kernel_cost = cost();
    }
    // The graph keeps the captured kernel; every replay runs a copy of it.
    auto proto = std::make_shared<LaunchedKernel<K>>(std::move(launched));
    c10::openreg::capture::KernelFactory make = [captured = std::shared_ptr<const LaunchedKernel<K>>(proto)](
                                                    std::uint64_t replay_seed) {
      LaunchedKernel<K> copy(*captured);
      if constexpr (HasSeed<K>::value) copy.kernel.seed = replay_seed;
      return ::openreg::sim::Task(std::move(copy));
    };
    std::optional<c10::openreg::capture::SeedSource> source;
    if (seed != nullptr) source = *seed;
    if (c10::openreg::capture::record_kernel(stream, name, std::move(make), kernel_cost, std::move(source))) return;
    c10::openreg::translate_sim_errors([&] {
      if (kernel_cost) {
        stream.sim().launch(name, LaunchedKernel<K>(std::move(*proto)), *kernel_cost);
      } else {
        stream.sim().launch(name, LaunchedKernel<K>(std::move(*proto)));
      }
    });
  }
}

//! Enqueues `kernel` (a movable `void()` callable) on `stream` under the name `name` (a literal
//! or an interned name: it must outlive the item). `cost` (a callable returning sim::KernelCost,
//! engine/KernelCost.h) is what the kernel costs on the device profile: it is called only when one
//! is set (virtual time, Note [Virtual time] in sim/src/virtual_clock.cpp); without `cost` a kernel
//! takes the profile's minimum time. On a capturing stream the kernel is recorded into the graph
//! instead; `seed` says where a random kernel's seed came from, so that replays draw new numbers.
//! `access` (KernelRanges, engine/KernelRanges.h) says what the kernel reads and writes, for
//! timing-only execution (Note [Values in timing-only execution] in sim/src/stream.cpp); null outside
//! it, or where the caller cannot say.
template <typename Kernel, typename CostFn = std::nullptr_t>
void launch_kernel(const c10::openreg::OpenRegStream& stream, const char* name, Kernel&& kernel,
                   CostFn&& cost = nullptr, const c10::openreg::capture::SeedSource* seed = nullptr,
                   const ::openreg::sim::KernelAccess* access = nullptr) {
  using K = std::decay_t<Kernel>;  // inline only when nothrow-movable, else boxed (sim::Task)
  auto& sim = stream.sim();
  const auto threads = static_cast<std::int32_t>(team_at_issue(
      stream.device_index(), stream.id(), static_cast<int>(sim.device().compute_threads()), outlasts_host(kernel)));
  if (C10_UNLIKELY(c10::openreg::capture::capture_underway()) && c10::openreg::capture::is_capturing(stream)) {
    capture_kernel(stream, name, LaunchedKernel<K>{std::forward<Kernel>(kernel), threads}, cost, seed);
    return;
  }
  c10::openreg::translate_sim_errors([&] {
    if constexpr (!std::is_same_v<std::decay_t<CostFn>, std::nullptr_t>) {
      if (virtual_time_on()) {
        if (access != nullptr) {
          sim.launch(name, LaunchedKernel<K>{std::forward<Kernel>(kernel), threads}, cost(), *access);
        } else {
          sim.launch(name, LaunchedKernel<K>{std::forward<Kernel>(kernel), threads}, cost());
        }
        return;
      }
    }
    sim.launch(name, LaunchedKernel<K>{std::forward<Kernel>(kernel), threads});
  });
}

//! Enqueues a byte copy of `bytes` from `src` to `dst` on `stream`'s copy engine under the name `name`
//! (a literal). The pointers are taken now.
inline void launch_copy(const c10::openreg::OpenRegStream& stream, void* dst, const void* src, std::size_t bytes,
                        const char* name) {
  if (C10_UNLIKELY(c10::openreg::capture::capture_underway()) &&
      c10::openreg::capture::record_copy(stream, dst, src, bytes, name)) {
    return;
  }
  c10::openreg::translate_sim_errors([&] { stream.sim().copy(dst, src, bytes, name); });
}

//! Holds `keep_alive` (a movable value) until the work enqueued on `stream` so far has run, then drops
//! it on the device thread: how a copy keeps the host memory it reads or writes (CUDA's host allocator
//! guards pinned buffers with events; keeping them is equivalent).
template <typename KeepAlive>
void keep_until_done(const c10::openreg::OpenRegStream& stream, KeepAlive&& keep_alive) {
  if (C10_UNLIKELY(c10::openreg::capture::capture_underway())) {
    // A captured copy reads or writes this host memory at every replay: the graph keeps it.
    std::shared_ptr<void> keep = std::make_shared<std::decay_t<KeepAlive>>(std::forward<KeepAlive>(keep_alive));
    if (c10::openreg::capture::record_keep(stream, keep)) return;
    c10::openreg::translate_sim_errors(
        [&] { stream.sim().host_callback("openreg::copy_release", [keep = std::move(keep)] {}); });
    return;
  }
  c10::openreg::translate_sim_errors([&] {
    stream.sim().host_callback("openreg::copy_release", [keep = std::forward<KeepAlive>(keep_alive)] {});
  });
}

}  // namespace at::openreg
