#pragma once
// Stream: an in-order asynchronous queue of work items on one device.
//
// Items of one stream run one at a time, in enqueue order; items of different streams may run at the
// same time. A stream owns no thread: when work arrives at an idle stream it schedules itself on its
// device's task arena, drains items and goes idle again. Copies run on the device's copy engines and
// event waits park the stream (no worker thread is held while a stream waits).
//
// Thread-safety: every member function may be called from any host thread concurrently.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "openreg/sim/export.h"
#include "openreg/sim/task.h"
#include "openreg/sim/timing_only.h"

namespace openreg::sim {

class Device;
class Event;
class CopyEngine;  // private to the library
struct WorkItem;     // private to the library
struct EventRecord;  // private to the library
struct KernelCost;   // openreg/sim/cost.h

//! Identifies a stream within its device. Ids are never reused while the device lives.
using StreamId = std::int64_t;
//! Id of each device's default stream.
inline constexpr StreamId kDefaultStreamId = 0;

//! Scheduling priority: when both are ready, a device's threads take high-priority streams first.
enum class StreamPriority : int {
  kNormal = 0,  //!< the default
  kHigh = 1,    //!< served before kNormal streams
};

//! The priority range in CUDA's convention (what torch.cuda.Stream and priority_range() use): a lower
//! number is a higher priority; priority_range() returns (kLeastStreamPriority, kGreatestStreamPriority).
inline constexpr int kLeastStreamPriority = 0;      //!< maps to StreamPriority::kNormal
inline constexpr int kGreatestStreamPriority = -1;  //!< maps to StreamPriority::kHigh
//! A CUDA-convention priority as a StreamPriority; out-of-range values are clamped to the range, as
//! cudaStreamCreateWithPriority does.
constexpr StreamPriority stream_priority_from_cuda(int priority) noexcept {
  return priority <= kGreatestStreamPriority ? StreamPriority::kHigh : StreamPriority::kNormal;
}
//! The CUDA-convention number of a StreamPriority (for Stream.priority).
constexpr int cuda_stream_priority(StreamPriority priority) noexcept {
  return priority == StreamPriority::kHigh ? kGreatestStreamPriority : kLeastStreamPriority;
}

//! What a work item is; shown in traces and error messages.
enum class ItemKind : std::uint8_t { kKernel, kCopy, kHostCallback, kEventRecord, kEventWait };

class OPENREG_SIM_API Stream : public std::enable_shared_from_this<Stream> {
 public:
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  //! This stream's id on its device.
  StreamId id() const noexcept;
  //! Index of the device this stream belongs to.
  int device_index() const noexcept;
  //! The device this stream belongs to.
  Device& device() const noexcept;
  //! Scheduling priority, fixed at creation.
  StreamPriority priority() const noexcept;

  //! launch, copy and host_callback called from a host thread wait while the stream already holds
  //! Config::launch_queue_depth uncompleted items (see Note [Bounded launch queue]); record and wait,
  //! and anything enqueued from the device's own threads (kernels, host callbacks), never wait.
  //! Do not call them while holding a lock that work items or host callbacks take.
  //!
  //! Enqueues a kernel: `fn` runs on one of the device's compute threads after everything enqueued
  //! before it. `name` must outlive the item (a literal, or a name interned with intern_name()).
  //! An exception thrown by `fn` is kept and reported, with `name`, by the next query/synchronize of
  //! this stream, of an event recorded after it, or of the device. Throws kInvalidStream if destroyed.
  void launch(const char* name, Task fn);
  //! The same, with what the kernel does: with a device profile its virtual duration and share of the
  //! device come from `cost` (Note [Cost model]); without one the cost is ignored.
  void launch(const char* name, Task fn, const KernelCost& cost);
  //! The same, with what the kernel reads and writes: in timing-only execution it runs when what it
  //! reads holds values (Note [Values in timing-only execution] in stream.cpp). The ranges are read
  //! during the call only.
  void launch(const char* name, Task fn, const KernelCost& cost, const KernelAccess& access);

  //! Enqueues a copy of `bytes` bytes; runs on a copy engine of this stream's device, ordered with the
  //! rest of the stream. The direction (host/device/peer) is derived from the pointers. With a copy
  //! bandwidth configured it takes bytes/bandwidth of simulated time without burning a core.
  //! Both ranges must stay valid until the copy has run.
  void copy(void* dst, const void* src, std::size_t bytes, const char* name = "copy");

  //! Enqueues a host callback: `fn` runs after everything enqueued before it. It must not block on
  //! this stream (that would wait for itself).
  void host_callback(const char* name, Task fn);

  //! Enqueues a record of `event`: it completes when all work enqueued before it has run.
  void record(const std::shared_ptr<Event>& event);

  //! Makes all work enqueued after this call wait until the event's most recent record (at the time of
  //! this call) completes. A no-op if the event was never recorded. Works across streams and devices.
  void wait(const std::shared_ptr<Event>& event);

  //! True when all enqueued work has run. Throws WorkFailed (once) if items failed, or a wait was
  //! satisfied by an event recorded after a failure: the first named, the others counted
  //! (see Note [Failure reporting] in stream.cpp).
  bool query();

  //! Blocks until all work enqueued before the call has run (short spin, then a futex wait).
  //! Throws WorkFailed (once) if an item failed; the stream keeps working afterwards.
  //! Called from one of this stream's own items it throws kInvalidArgument (it could never return).
  void synchronize();

  //! Number of items ever enqueued / completed (monotonic; for tests and stats).
  std::uint64_t enqueued_count() const noexcept;
  std::uint64_t completed_count() const noexcept;

  // --- implementation-defined below (constructor is for Device) ---
 private:
  friend class Device;
  friend class CopyEngine;
  friend class Event;
  struct State;

  Stream(Device& device, StreamId id, StreamPriority priority);
  void enqueue(WorkItem* item, const KernelCost* cost = nullptr);     // hands a filled item to the queue; may schedule the stream
  WorkItem* acquire_item();        // a recycled (or new) item; throws kInvalidStream if destroyed
  void drain();                           // runs a batch on a compute thread; owner only
  void dispatch();                        // runs what needs no compute thread (copies, events) here; owner only
  WorkItem* take_next();                  // the next item to run; owner only
  bool step(WorkItem* item);              // runs one item; false once ownership has passed on
  bool finish(WorkItem* item);     // completes the owned current item; false once ownership is released
  void resume(WorkItem* item);     // completes a parked item and continues the stream on the device
  void resume_here(WorkItem* item);  // likewise, dispatching from the calling (copy engine) thread
  void wait_idle();                       // synchronize() without reporting errors
  // The unreported failures as one message (first named, others counted), cleared; `count` gets how
  // many it stands for. False if none. See Note [Failure reporting].
  bool take_error(std::string* message, std::uint64_t* count = nullptr);
  bool peek_error(std::string* message) const;  // likewise, kept
  void complete_record(EventRecord& record);    // runs a record item; resumes the waits it releases
  bool wait_or_park(EventRecord& record, WorkItem* item);  // true if done; else parks (ownership passes)
  void inherit_failure(const EventRecord& record);  // a satisfied wait takes over the record's failure
  void run_task(WorkItem* item);          // a kernel or host callback, failures kept on the stream
  void mark_destroyed() noexcept;

  std::unique_ptr<State> s_;
};

//! Returns a pointer to a process-lifetime copy of `name`, equal strings giving the same pointer.
//! For item names that are not literals (e.g. operator names). Thread-safe.
OPENREG_SIM_API const char* intern_name(const char* name);

}  // namespace openreg::sim
