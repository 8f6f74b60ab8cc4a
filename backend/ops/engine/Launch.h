#pragma once
// Note [Launching a kernel on a stream]
// Every kernel path (the async path's work items, the fast kernels, copies, fill_) enqueues its kernel
// through launch_kernel, which owns what every kernel needs on the device thread:
//  - its share of the device's compute threads (IntraOpThreadsScope, ExecuteThreads.h), sized from
//    the device's thread count read on the host when the kernel is enqueued;
//  - recycled memory for its large CPU allocations (KernelScratchScope, Note [Kernel scratch memory]
//    in ops/KernelScratch.cpp);
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

#include "backend/OpenRegRuntime.h"
#include "backend/OpenRegStream.h"
#include "backend/ops/ExecuteThreads.h"
#include "backend/ops/KernelScratch.h"

#include <c10/util/Exception.h>

#include <openreg/sim/task.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace at::openreg {

//! A kernel as the stream runs it: the intra-op threads scope and the error policy around the closure.
template <typename Kernel>
struct LaunchedKernel {
  Kernel kernel;
  std::int32_t compute_threads;
  c10::DeviceIndex device;

  void operator()() {
    try {
      IntraOpThreadsScope threads(device, compute_threads);
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

//! Enqueues `kernel` (a movable `void()` callable) on `stream` under the name `name` (a literal
//! or an interned name: it must outlive the item).
template <typename Kernel>
void launch_kernel(const c10::openreg::OpenRegStream& stream, const char* name, Kernel&& kernel) {
  using K = std::decay_t<Kernel>;  // inline only when nothrow-movable, else boxed (sim::Task)
  auto& sim = stream.sim();
  const auto threads = static_cast<std::int32_t>(sim.device().compute_threads());
  c10::openreg::translate_sim_errors([&] {
    sim.launch(name, LaunchedKernel<K>{std::forward<Kernel>(kernel), threads, stream.device_index()});
  });
}

}  // namespace at::openreg
