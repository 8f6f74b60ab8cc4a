#pragma once
// CollectiveEvent: the end of one collective (torch.distributed on openreg), as the runtime boundary
// exposes it to the bindings. It is pending from construction until the communication thread that runs
// the collective calls complete() or fail(); streams that block() on it meanwhile park without holding
// a worker thread (Note [Host-completed records] in sim/src/event.cpp; the Python side is Note
// [Stream-ordered collectives] in python/torch_openreg/_distributed/_comm_queue.py). Dropped
// uncompleted, it fails, so no stream waits forever.
//
// Thread-safety: every member may be called from any thread; complete()/fail() take effect once.

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <string>
#include "backend/Export.h"

namespace openreg::sim {
class Event;
}  // namespace openreg::sim

namespace c10::openreg {

class OPENREG_BACKEND_API CollectiveEvent {
 public:
  //! A pending end on device `device` (checked: c10::AcceleratorError for a bad index).
  explicit CollectiveEvent(c10::DeviceIndex device);
  ~CollectiveEvent();
  CollectiveEvent(const CollectiveEvent&) = delete;
  CollectiveEvent& operator=(const CollectiveEvent&) = delete;

  //! The collective is issued on `stream`: it starts after the work queued there so far. Returns the
  //! virtual time (ns since the runtime started) at which the stream reaches it, or -1 without a
  //! device profile. Called once, before block().
  std::int64_t issue_on(const c10::Stream& stream);
  //! Blocks the calling thread until the stream given to issue_on() has reached the collective (the
  //! communication thread, before it runs it); raises that stream's failure.
  void wait_issued();
  //! Places the collective on the virtual clock over [start_ns, end_ns) (Runtime::place_communication):
  //! its end is end_ns for whoever waits on it. Call before handing the event to other threads.
  void place(std::int64_t start_ns, std::int64_t end_ns);
  //! Work enqueued on `stream` from now on runs after the collective ends (device-side wait).
  void block(const c10::Stream& stream);
  //! Ends the collective successfully; false if it had already ended.
  bool complete();
  //! Ends it with a failure that every stream which waited on it reports, like a failed kernel.
  bool fail(const std::string& message);
  //! Whether it has ended (either way). Never throws.
  bool completed() const noexcept;
  //! Blocks the calling thread until it ends; raises its failure (once).
  void synchronize();
  //! Shows the collective as `name` on lane `lane` (a stream id of the device) of the device timeline,
  //! from mark_started() until it ends.
  void set_trace(const std::string& name, c10::StreamId lane);
  //! The collective starts running now (the traced span's start).
  void mark_started() noexcept;
  c10::DeviceIndex device() const noexcept;
  //! The sim event that completes when the collective ends (for the allocator: memory/DeviceAllocator.h).
  std::shared_ptr<::openreg::sim::Event> end_event() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace c10::openreg
