#pragma once
// The recording side of tracing (trace.h is the user side): called by whoever runs an item, only
// after trace_enabled() returned true.

#include "openreg/sim/trace.h"

namespace openreg::sim {

//! Appends to the calling thread's buffer (uncontended lock: only trace_start/stop take it too).
void trace_record(const TraceRecord& record);

}  // namespace openreg::sim
