#pragma once
// The device timeline (torch_openreg.trace), part of the runtime boundary: the sim's trace recorder as
// the layers above see it, so that the Python module reaches the sim only through the backend.

#include <cstdint>
#include <string>
#include <vector>

namespace c10::openreg {

//! One work item that ran on a device.
struct TraceItem {
  std::string name;
  int device;
  std::int64_t stream;      //!< the stream's id on its device
  const char* kind;         //!< "kernel", "copy", "host_callback", "event_record" or "event_wait"
  std::int64_t start_ns;    //!< steady clock
  std::int64_t end_ns;
  std::uint64_t bytes;      //!< bytes moved, for copies; 0 otherwise
};

//! Starts recording every work item of every device (clearing earlier records).
void trace_start();
//! Stops recording; returns the items since trace_start(), sorted by start time.
std::vector<TraceItem> trace_stop();

}  // namespace c10::openreg
