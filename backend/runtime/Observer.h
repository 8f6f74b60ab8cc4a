#pragma once
// Note [The runtime reports to its observer]
// The runtime and memory layers report a few happenings to whoever observes them, the way CUDA's runtime
// reports to c10's GPUTrace and torch.cuda's sanitizer listens there: a device synchronize, a
// host-completed event waited on or seen complete (runtime/CollectiveEvent.cpp), a device block or a
// pinned host block freed (memory/). The observer is the race checker (sanitizer/Sanitizer.cpp). It
// sits above both layers, so they call it through this interface and never include it: dependencies
// inside backend/ point one way (docs/design.md).
//
// The observer is installed once, when the race checker turns on, and never removed (it is never
// destroyed). runtime_observer() is a single acquire load: null (the checker is off) costs a load and a
// branch, as the checker's own inline hooks do; acquire pairs with the release in
// set_runtime_observer, so a caller that sees the pointer sees the constructed observer.
//
// The runtime also runs one start hook when it first starts, with the OPENREG_SANITIZER mode it parsed
// (Note [OPENREG_SANITIZER is read when the runtime starts] in sanitizer/Sanitizer.cpp). The hook is
// set by a static initializer of this library, which runs before anything can start the runtime.

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace c10::openreg {

class RuntimeObserver {
 public:
  virtual ~RuntimeObserver() = default;
  //! The host saw every stream of `device` complete (torch.openreg.synchronize and friends).
  virtual void on_device_sync(c10::DeviceIndex device) = 0;
  //! `stream` now waits for the host-completed event `event` (a collective's end).
  virtual void on_event_wait(const void* event, const c10::Stream& stream) = 0;
  //! The host saw the event `event` complete.
  virtual void on_event_done(const void* event) = 0;
  //! A device block was freed by its owner; `recorded` are the streams record_stream added.
  virtual void on_block_freed(int device, const void* ptr, std::size_t size, std::int64_t alloc_stream,
                              const std::vector<std::int64_t>& recorded) = 0;
  //! A pinned host block was freed and its bytes may be handed out again.
  virtual void on_pinned_freed(const void* ptr, std::size_t size) = 0;

 protected:
  RuntimeObserver() = default;
  RuntimeObserver(const RuntimeObserver&) = default;
  RuntimeObserver& operator=(const RuntimeObserver&) = default;
};

namespace detail {
extern std::atomic<RuntimeObserver*> g_runtime_observer;
}  // namespace detail

//! The installed observer, or null (see the Note for the memory order).
inline RuntimeObserver* runtime_observer() noexcept {
  return detail::g_runtime_observer.load(std::memory_order_acquire);
}
//! Installs `observer` (which must live for the rest of the process).
void set_runtime_observer(RuntimeObserver* observer) noexcept;

//! OPENREG_SANITIZER, as the runtime parsed it.
enum class RaceCheck { kOff, kRaise, kReport };
using RuntimeStartHook = void (*)(RaceCheck mode);
//! Sets the hook the runtime runs once when it first starts (the last one set wins).
void set_runtime_start_hook(RuntimeStartHook hook) noexcept;
//! Runs the start hook, if one is set (the runtime calls it once).
void run_runtime_start_hook(RaceCheck mode);

}  // namespace c10::openreg
