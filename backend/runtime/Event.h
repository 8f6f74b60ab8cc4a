#pragma once
// OpenRegEvent: a device event, as the backend uses one (torch.Event's implementation in the guard, the
// legacy profiler's stubs, ordering one stream after another in copies). A shared handle on one sim
// event, like ATen's CUDAEvent on a cudaEvent_t: copies refer to the same event, and streams that
// recorded or wait on it keep it alive themselves, so the handle may go away at any time.
//
// Thread-safety: an event may be recorded, waited on and queried from any threads at once (the sim
// event is thread-safe); a record that races with a wait is ordered by the sim, as CUDA orders them.

#include "backend/Export.h"
#include "backend/runtime/Stream.h"

#include <memory>

namespace openreg::sim {
class Event;
}  // namespace openreg::sim

namespace c10::openreg {

class OPENREG_BACKEND_API OpenRegEvent {
 public:
  //! A new event; `timing` events can measure elapsed_ms (torch's enable_timing).
  explicit OpenRegEvent(bool timing = false);

  //! Captures the work enqueued on `stream` so far; later waits wait for it.
  void record(const OpenRegStream& stream);
  //! Makes work enqueued later on `stream` wait for the last record (nothing to wait for if none).
  void block(const OpenRegStream& stream) const;
  //! Whether the last record's work has run (raises its failure, translated).
  bool query() const;
  //! Blocks until the last record's work has run (raises its failure, translated).
  void synchronize() const;
  //! Milliseconds between this event's record and `end`'s (both timing events, both completed).
  double elapsed_ms(const OpenRegEvent& end) const;

 private:
  std::shared_ptr<::openreg::sim::Event> event_;
};

//! Makes work enqueued later on `waiter` wait for the work enqueued on `producer` so far (one event,
//! recorded on `producer`, waited on by `waiter`; nothing when they are the same stream).
OPENREG_BACKEND_API void wait_stream(const OpenRegStream& waiter, const OpenRegStream& producer);

}  // namespace c10::openreg
