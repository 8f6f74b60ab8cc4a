#pragma once
// OPENREG_SANITIZER: the backend's hooks into the stream race checker (Note [Stream race checker
// model] in RaceChecker.h).
//
// Note [Sanitizer hooks]
// Every place that issues device work or orders it calls one inline hook, which is a single load of
// a static flag and a branch when the checker is off (relaxed: the flag is set before first use, by
// the environment when the runtime starts or by torch.openreg.sanitizer.enable(), and nothing else is published
// through it). Where the hooks are:
//   engine/OpEngine.cpp   every op's arguments by the schema's write flags (on_op), before any
//                             path runs, and its fresh outputs after (on_outputs);
//   engine/SyncPath.cpp   the host waits for the stream (on_host_wait);
//   engine/FastKernels.cpp the fast kernels' operands (on_kernel);
//   ops/Copy.cpp, Factory.cpp copy_ on both devices and fill_; blocking copies wait (on_host_wait);
//   registration/Guard.cpp    event record / wait / synchronize / query, stream synchronize / query;
//   the runtime and memory layers, which sit below the checker, report through the runtime observer
//   (Note [The runtime reports to its observer] in runtime/Observer.h), which the checker installs when
//   it turns on: a device synchronize (runtime/Device.cpp), a stream or the host waiting for a
//   collective's end (runtime/CollectiveEvent.cpp), a device block's free, for record_stream
//   (memory/BlockCache.cpp), and a pinned block's free (memory/HostAllocator.cpp);
//   python/csrc/SanitizerBindings.cpp: the host's CPU ops while a copy may still use pinned memory
//                             (on_host_access, Note [Host access to pinned memory] in Sanitizer.cpp);
//   registration/Graph.cpp       a graph's replay: the ranges its capture accessed (on_replay);
//   python/csrc/SanitizerBindings.cpp: compiled kernels (python/torch_openreg/_inductor: the generated
//                             wrapper reports each kernel's buffers before enqueueing it, on_launch) and
//                             collectives (python/torch_openreg/_distributed/_group.py, on_collective);
// Accesses are checked when the op is issued, on the issuing host thread, so a race is raised at the
// op that completes it and never depends on the device's timing.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Stream.h>
#include <c10/util/SmallVector.h>

#include "backend/Export.h"

namespace c10 { class OperatorHandle; }
namespace c10::openreg::capture { struct Access; }

namespace openreg::sanitizer {

struct IssueContext;

extern std::atomic<bool> g_enabled;
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

//! How the checker reacts to a race.
enum class Mode : int {
  kOff = 0,
  kRaise = 1,   //!< raise at the op that completes the race (OPENREG_SANITIZER=1)
  kReport = 2,  //!< record every race, continue, print a summary at exit and exit non-zero ("report")
};

//! Turns the checker on. Starts the runtime first, so OPENREG_SANITIZER is applied before (a malformed
//! value throws its configuration error). Returns false when the checker is already on in another mode
//! (the environment or an earlier call decided it). Thread-safe.
OPENREG_BACKEND_API bool enable(Mode mode);
//! The mode decided so far: kOff until the runtime started with OPENREG_SANITIZER set or enable() ran.
OPENREG_BACKEND_API Mode mode();
//! Races found so far (both modes), and their messages.
OPENREG_BACKEND_API std::size_t race_count();
OPENREG_BACKEND_API std::vector<std::string> race_messages();

//! Installed by the Python module (python/csrc/SanitizerBindings.cpp): whether the calling thread is
//! running Python code, answered without the GIL. Threads for which it says no (the autograd engine's
//! device threads, C++ threads) get no Python stack (Note [Issue contexts] in Sanitizer.cpp). Unset
//! (a C++ program): no thread has one.
using PythonFramesProbe = bool (*)();
OPENREG_BACKEND_API void set_python_frames_probe(PythonFramesProbe probe);

//! Installed by the Python module (python/csrc/SanitizerBindings.cpp): turns the calling thread's watch of
//! its CPU ops on (true) or off (false) and returns whether it is on now (Note [Host access to pinned
//! memory] in Sanitizer.cpp). Called only on a thread that runs Python, without the GIL and no lock held.
//! Unset (a C++ program): host accesses are not seen.
using HostAccessWatcher = bool (*)(bool watch);
OPENREG_BACKEND_API void set_host_access_watcher(HostAccessWatcher watcher);
//! The host thread itself read `reads` and wrote `writes` (a CPU op the watch saw); those in pinned host
//! memory are checked against the copies that use it. Raises c10::AcceleratorError on a race (raise
//! mode). No-op when off.
OPENREG_BACKEND_API void on_host_access(const std::string& name, const std::vector<at::Tensor>& reads,
                                        const std::vector<at::Tensor>& writes);

//! error_code of the torch.AcceleratorError (a RuntimeError) a race raises, and report mode's exit status.
inline constexpr int kStreamRaceErrorCode = 66;

namespace detail {
struct OpAccesses;  // one op's accesses, checked together (one issue context)
void op(const char* name, c10::ArrayRef<c10::IValue> args, c10::ArrayRef<char> written);
void outputs(const char* name, c10::ArrayRef<c10::IValue> outs, c10::ArrayRef<char> fresh);
void kernel(const char* name, std::initializer_list<const at::Tensor*> reads,
            std::initializer_list<const at::Tensor*> writes);
void copy(const at::Tensor& src, const at::Tensor& dst);
void event_record(const void* event, const c10::Stream& s);
void event_wait(const void* event, const c10::Stream& s);
void event_sync(const void* event);
void host_wait(const c10::Stream& s);
void device_sync(c10::DeviceIndex d);
void pinned_freed(const void* ptr, std::size_t size);
void block_freed(int device, const void* ptr, std::size_t size, std::int64_t alloc_stream,
                 const std::vector<std::int64_t>& recorded_streams);
}  // namespace detail

//! A kernel launched outside the op engine (a compiled kernel: python/torch_openreg/_inductor) on the
//! current stream of the current device: `reads` read and `writes` written. `name` is copied (interned
//! once per distinct name). Raises c10::AcceleratorError on a race (raise mode). No-op when off.
OPENREG_BACKEND_API void on_launch(const std::string& name, const std::vector<at::Tensor>& reads,
                                   const std::vector<at::Tensor>& writes);
//! A graph replayed on `stream` (registration/Graph.cpp): `accesses` are the ranges its capture read and
//! wrote (Note [Graphs in the race checker] in Sanitizer.cpp). Raises c10::AcceleratorError on a race
//! (raise mode). No-op when off.
OPENREG_BACKEND_API void on_replay(const char* name, const c10::Stream& stream,
                                   const std::vector<c10::openreg::capture::Access>& accesses);
//! A collective on `device` (Note [Collectives in the race checker] in Sanitizer.cpp): it starts after the
//! work issued so far on the device's current stream, reads `reads` and writes `writes` on the device's
//! collective lane, and ends at `end` (a CollectiveEvent), which streams and the host wait for through
//! on_event_wait / on_event_done. No-op when off.
OPENREG_BACKEND_API void on_collective(const std::string& name, int device, const void* end,
                                       const std::vector<at::Tensor>& reads, const std::vector<at::Tensor>& writes);

// ---------------------------------------------------------------------------------------------------
// The hooks (one line at each call site).

//! An op's arguments, read or written by the schema's alias annotations; `plan` is the op engine's
//! OpPlan (its interned name and per-argument `written` flags).
template <class Plan>
inline void on_op(const Plan& plan, c10::ArrayRef<c10::IValue> args) {
  if (!enabled()) return;
  c10::SmallVector<char, 16> written;  // no allocation for the usual op
  for (const auto& a : plan.args) written.push_back(a.written);
  detail::op(plan.name, args, written);
}
//! An op's results: the fresh ones are written by it (written arguments and views were seen by on_op).
template <class Plan>
inline void on_outputs(const Plan& plan, c10::ArrayRef<c10::IValue> outs) {
  if (!enabled()) return;
  c10::SmallVector<char, 8> fresh;
  for (const auto& r : plan.returns) fresh.push_back(r.kind == decltype(r.kind)::kFresh);
  detail::outputs(plan.name, outs, fresh);
}
//! A kernel's operands on the current streams of their devices (fast kernels, fill_).
inline void on_kernel(const char* name, std::initializer_list<const at::Tensor*> reads,
                      std::initializer_list<const at::Tensor*> writes) {
  if (enabled()) detail::kernel(name, reads, writes);
}
//! copy_: src read and dst written; a cross-device copy on both devices, ordered with both streams.
inline void on_copy(const at::Tensor& src, const at::Tensor& dst) {
  if (enabled()) detail::copy(src, dst);
}
inline void on_event_record(const void* e, const c10::Stream& s) { if (enabled()) detail::event_record(e, s); }
inline void on_event_wait(const void* e, const c10::Stream& s) { if (enabled()) detail::event_wait(e, s); }
//! The host saw `e` complete (synchronize, or a query that returned true).
inline void on_event_done(const void* e) { if (enabled()) detail::event_sync(e); }
//! The host saw all work issued on `s` complete (synchronize, a blocking copy, the sync path, a query
//! that returned true).
inline void on_host_wait(const c10::Stream& s) { if (enabled()) detail::host_wait(s); }

}  // namespace openreg::sanitizer
