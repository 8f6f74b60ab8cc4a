#pragma once
// The device timeline (torch.openreg.trace), part of the runtime boundary: the sim's trace recorder as
// the layers above see it, so that the Python module reaches the sim only through the backend.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/Export.h"

namespace openreg::sim {
class TraceSession;
}  // namespace openreg::sim

namespace c10::openreg {

//! The correlation tag of work enqueued while no CPU op is being profiled.
inline constexpr std::uint64_t kNoTraceCorrelation = 0;

//! One work item that ran on a device.
struct TraceItem {
  std::string name;
  int device;
  std::int64_t stream;      //!< the stream's id on its device
  const char* kind;         //!< "kernel", "copy", "host_callback", "event_record" or "event_wait"
  std::int64_t start_ns;    //!< steady clock
  std::int64_t end_ns;
  std::uint64_t bytes;      //!< bytes moved, for copies; 0 otherwise
  std::uint64_t correlation;  //!< the enqueuing thread's trace_correlation() (kNoTraceCorrelation: none)
  std::int64_t enqueue_ns;    //!< steady clock at the enqueue; 0 when it was enqueued before recording began

  bool is_copy() const noexcept;
};

//! Starts recording every work item of every device (clearing earlier records).
OPENREG_BACKEND_API void trace_start();
//! Stops recording; returns the items since trace_start(), sorted by start time.
OPENREG_BACKEND_API std::vector<TraceItem> trace_stop();

//! A recording of every device's work items that is independent of trace_start()/trace_stop() and of
//! other recordings (the profiler's sessions and torch.openreg.trace may overlap).
class TraceRecording {
 public:
  TraceRecording();  //!< starts recording
  ~TraceRecording();
  TraceRecording(const TraceRecording&) = delete;
  TraceRecording& operator=(const TraceRecording&) = delete;

  //! Stops recording; returns the items recorded since construction, sorted by start time. Once only.
  std::vector<TraceItem> stop();

 private:
  std::unique_ptr<::openreg::sim::TraceSession> session_;
};

//! The trace's clock (steady clock, ns): the clock of TraceItem's times.
std::int64_t trace_clock_ns() noexcept;

//! The calling thread's correlation tag, copied into every work item it enqueues from now on.
void set_trace_correlation(std::uint64_t tag) noexcept;
std::uint64_t trace_correlation() noexcept;

}  // namespace c10::openreg
