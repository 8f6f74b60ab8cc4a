#pragma once
// WorkItem: one entry of a stream's queue. Items are pooled per stream (see Stream::State) so that a
// steady stream of launches does not allocate: an item is taken from the pool by the enqueuer, owned
// by the queue until the stream's drainer (or a copy engine, or an event's waiter list, while the
// stream is parked) completes it, then returned to the pool.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "event_record.h"
#include "openreg/sim/cost.h"
#include "openreg/sim/event.h"
#include "openreg/sim/stream.h"
#include "openreg/sim/task.h"

namespace openreg::sim {

class CopyEngine;

//! Event records and waits: markers that hold no memory and never wait for launch-queue room.
inline bool is_marker(ItemKind kind) noexcept {
  return kind == ItemKind::kEventRecord || kind == ItemKind::kEventWait;
}

//! What timing-only execution does with a kernel or a copy (Note [Values in timing-only execution] in
//! stream.cpp); execution that runs everything ignores it.
enum class TimingOnly : std::uint8_t {
  kSkip,     //!< only timed: a kernel does not run; a copy moves nothing (a host destination reads zeros)
  kValues,   //!< runs on values: a kernel runs and its failure is reported; a copy moves its data
  kControl,  //!< a kernel that says nothing of what it reads, small enough to run: what it raises is dropped
};

struct WorkItem {
  ItemKind kind = ItemKind::kKernel;
  const char* name = "";
  Task fn;                        // kKernel, kHostCallback
  void* dst = nullptr;            // kCopy
  const void* src = nullptr;      // kCopy
  std::size_t bytes = 0;          // kCopy
  CopyEngine* engine = nullptr;   // kCopy: chosen at enqueue from the pointers
  bool host_dst = false;          // kCopy: dst is host memory (see Note [Fresh host destinations])
  std::shared_ptr<EventRecord> record;  // kEventRecord: the record to complete; kEventWait: the one awaited
  std::uint64_t correlation = 0;  // the enqueuer's trace_correlation(), for trace records
  std::int64_t enqueue_ns = 0;    // when it was enqueued, while tracing (0 otherwise)
  std::int64_t wait_start_ns = 0; // kEventWait: when the stream reached it, while tracing (0 otherwise)
  bool fuzzed = false;            // its schedule-fuzz delay was decided (Note [Schedule fuzzing])
  CopyRoute route = CopyRoute::kDeviceToDevice;  // kCopy: which link (Note [Cost model])
  bool pinned = false;            // kCopy: its host side is pinned memory
  TimingOnly timing_only = TimingOnly::kSkip;  // kKernel, kCopy: what timing-only execution does with it
  std::int64_t vstart = -1;       // virtual start and end (Note [Virtual time]); -1 without a profile
  std::int64_t vend = -1;

  //! Drops what the item holds (captured state, event reference) before it goes back to the pool.
  void clear() noexcept {
    fn.reset();
    record.reset();
    fuzzed = false;
    timing_only = TimingOnly::kSkip;
  }
};

}  // namespace openreg::sim
