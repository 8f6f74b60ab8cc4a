#pragma once
// Tracing: while at least one TraceSession is open, every work item that runs is recorded (name,
// device, stream, kind, start, end, bytes, correlation tag). Recording is per worker thread (no shared
// lock on the hot path); a session's stop() merges what was recorded since it opened. Sessions may
// overlap (torch.openreg.trace and the torch.profiler plugin share this one recorder).

#include <cstdint>
#include <memory>
#include <vector>

#include "openreg/sim/export.h"
#include "openreg/sim/stream.h"

namespace openreg::sim {

//! The correlation tag of an item enqueued while no tag was set.
inline constexpr std::uint64_t kNoCorrelation = 0;

//! One executed work item.
struct TraceRecord {
  const char* name;           //!< item name (literal or interned)
  int device;                 //!< device index
  StreamId stream;            //!< stream id on that device
  ItemKind kind;              //!< kernel, copy, ...
  std::int64_t start_ns;      //!< steady-clock ns when it started
  std::int64_t end_ns;        //!< steady-clock ns when it finished
  std::uint64_t bytes;        //!< bytes moved, for copies; 0 otherwise
  std::uint64_t correlation;  //!< the enqueuing thread's trace_correlation() at enqueue
  std::int64_t enqueue_ns;    //!< steady-clock ns when it was enqueued (0: enqueued while not tracing)
};

//! A consumer of the recorder: sees every item that finished running between its construction and
//! stop(). Thread-safe; any number may be open at once, each independent of the others.
class OPENREG_SIM_API TraceSession {
 public:
  //! Opens the session (recording is on while any session is open).
  TraceSession();
  //! Stops the session if stop() was not called.
  ~TraceSession();
  TraceSession(const TraceSession&) = delete;
  TraceSession& operator=(const TraceSession&) = delete;

  //! Closes the session and returns its records sorted by start time; later calls return nothing.
  std::vector<TraceRecord> stop();

  struct Cursors;  // implementation detail: where each thread buffer stood at open

 private:
  std::unique_ptr<Cursors> cursors_;  // null once stopped
};

//! Opens the process-wide default session (restarting it, with its records dropped, if open).
OPENREG_SIM_API void trace_start();
//! Closes the default session and returns its records (empty if it was not open).
OPENREG_SIM_API std::vector<TraceRecord> trace_stop();
//! Whether any session is open.
OPENREG_SIM_API bool trace_enabled() noexcept;
//! The clock used by traces and timing events, in ns.
OPENREG_SIM_API std::int64_t now_ns() noexcept;

//! Sets the calling thread's correlation tag; items it enqueues from now on carry it
//! (kNoCorrelation for none). The sim never interprets the tag: the backend maps it to profiler ops.
OPENREG_SIM_API void set_trace_correlation(std::uint64_t tag) noexcept;
//! The calling thread's correlation tag.
OPENREG_SIM_API std::uint64_t trace_correlation() noexcept;

}  // namespace openreg::sim
