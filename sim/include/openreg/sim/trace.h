#pragma once
// Tracing: when enabled, every work item that runs is recorded (name, device, stream, kind, start, end,
// bytes). Recording is per worker thread (no shared lock on the hot path); collect() merges.

#include <cstdint>
#include <vector>

#include "openreg/sim/stream.h"

namespace openreg::sim {

//! One executed work item.
struct TraceRecord {
  const char* name;          //!< item name (literal or interned)
  int device;                //!< device index
  StreamId stream;           //!< stream id on that device
  ItemKind kind;             //!< kernel, copy, ...
  std::int64_t start_ns;     //!< steady-clock ns when it started
  std::int64_t end_ns;       //!< steady-clock ns when it finished
  std::uint64_t bytes;       //!< bytes moved, for copies; 0 otherwise
};

//! Turns recording on (clearing earlier records) for all devices of the process.
void trace_start();
//! Turns recording off and returns every record since trace_start(), sorted by start time.
std::vector<TraceRecord> trace_stop();
//! Whether recording is on.
bool trace_enabled() noexcept;
//! The clock used by traces and timing events, in ns.
std::int64_t now_ns() noexcept;

}  // namespace openreg::sim
