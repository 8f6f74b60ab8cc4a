#pragma once
// Event: marks a point in a stream. Recording enqueues a marker; the event completes when its most
// recent marker runs. A stream wait is tied to the marker most recent at the call (Note [Event records]). Streams on any device can wait on it; host threads can query or block on it.
//
// Thread-safety: every member function may be called from any thread concurrently. Streams keep a
// reference to events they record or wait on, so dropping the last user reference is always safe.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "openreg/sim/export.h"

namespace openreg::sim {

class Stream;
struct WorkItem;     // private to the library
struct EventRecord;  // private to the library
class HostRecord;
class VirtualClock;  // private to the library

class OPENREG_SIM_API Event {
 public:
  //! Creates an event; `timing` enables elapsed_ms (records then take a timestamp).
  static std::shared_ptr<Event> create(bool timing = false);

  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  //! Whether elapsed_ms is allowed.
  bool timing() const noexcept;
  //! Whether record() was ever called.
  bool recorded() const noexcept;
  //! Device of the most recent record, or kNoDevice if never recorded.
  int device_index() const noexcept;
  //! device_index() of an event that was never recorded.
  static constexpr int kNoDevice = -1;

  //! True when the most recent record has completed (or the event was never recorded).
  //! Throws WorkFailed (once per record) if its stream had an unreported failure when the record ran.
  //! Only the most recent record counts: records may complete out of order across streams, and an
  //! earlier one completing does not complete the event (CUDA's rule). See Note [Event records].
  bool query();
  //! query() for the library's own bookkeeping (the caching allocator deciding whether a block's last
  //! use is over), never for a wait the program made. Without a device profile it is query(). With
  //! one, the record is done only when the modelled GPU has reached it by the calling thread's virtual
  //! time as well: a record that ran on this CPU ahead of the modelled timeline is not done yet, as
  //! cudaEventQuery would say, and the host's clock stays where it is (Note [Virtual time]). Throws
  //! like query().
  bool query_untimed();

  //! Blocks until the most recent record completes (returns at once if never recorded); short spin,
  //! then a futex wait. Throws like query().
  void synchronize();
  //! synchronize() for a wait the program did not make (the library's own threads: a communication
  //! thread waiting for the point a collective was issued at). With a device profile the host's
  //! virtual clock stays where it is: a real-time wait on a thread of the library's must not move the
  //! host timeline the program's threads share (Note [Virtual time]), or the timeline would depend on
  //! when that thread ran.
  void synchronize_untimed();

  //! Milliseconds between this event's completed record and `end`'s. Throws kNotTimed if either was
  //! created without timing, kNotRecorded if either was never recorded, kNotReady if either's record
  //! has not completed yet (like cudaEventElapsedTime).
  double elapsed_ms(const Event& end) const;

  //! Virtual time of the most recent record (ns since its runtime started; Note [Virtual time]), or -1
  //! without a device profile or record.
  std::int64_t virtual_time_ns() const;

  //! Makes a new record the most recent one, completed by a host thread through the returned
  //! HostRecord instead of by a stream (see Note [Host-completed records]). Streams that wait() on the
  //! event from now on park until it completes; query/synchronize see it like any record. `device` is
  //! the device the record is attributed to (device_index(), elapsed_ms); it is not checked here.
  std::shared_ptr<HostRecord> record_on_host(int device);

  // --- implementation-defined below ---
 private:
  friend class Stream;
  friend class HostRecord;
  // Completes `record` with `failure` (empty: success) and resumes the streams parked on it.
  static void complete_from_host(EventRecord& record, std::string failure);
  struct State;
  explicit Event(bool timing);
  // For Stream::record (after the record item is enqueued): makes `record` the most recent one.
  void set_latest(std::shared_ptr<EventRecord> record);
  // For Stream::wait: the most recent record at this moment, or null if never recorded.
  std::shared_ptr<EventRecord> latest() const;
  void synchronize_impl(bool timed);

  std::unique_ptr<State> s_;
};

//! One pending record of an event, completed by the host (Event::record_on_host). Completes at most
//! once: the first complete()/fail() wins and later calls return false. Thread-safe.
class OPENREG_SIM_API HostRecord {
 public:
  HostRecord(const HostRecord&) = delete;
  HostRecord& operator=(const HostRecord&) = delete;
  //! A record never completed fails here ("abandoned"), so no stream parked on it waits forever.
  ~HostRecord();

  //! Completes the record successfully: waiting streams continue. False if already completed.
  bool complete();
  //! Completes the record with a failure: it is reported like a failed item's, once by the event's
  //! query/synchronize, and by every stream that waited on it (Note [Failure reporting] in stream.cpp).
  //! False if already completed.
  bool fail(const std::string& message);
  //! Whether complete() or fail() has run.
  bool completed() const noexcept;

  //! Traces the host work this record ends as an item named `name` (which must outlive the trace: a
  //! literal or intern_name()) on lane `lane` of the record's device, from the call to mark_started()
  //! until completion. Call both before complete()/fail(); without them nothing is traced.
  void set_trace(const char* name, std::int64_t lane) noexcept;
  //! Stamps the start of the traced span (the host work begins now).
  void mark_started() noexcept;

 private:
  friend class Event;
  friend class Runtime;
  explicit HostRecord(std::shared_ptr<EventRecord> record);
  bool finish(std::string failure);
  // Runtime::place_communication: the record ends at virtual time `end` (absolute ns) for whoever
  // waits on it, and is traced over [start, end).
  void set_virtual_span(std::int64_t start, std::int64_t end, const std::shared_ptr<VirtualClock>& clock) noexcept;

  std::shared_ptr<EventRecord> record_;
  std::atomic<bool> claimed_{false};  // set by the one finish() that completes the record
  // Trace span: set by the host thread(s) before finish(); atomics because set_trace/mark_started
  // and finish may run on different threads (release/acquire pairs them).
  std::atomic<const char*> trace_name_{nullptr};
  std::atomic<std::int64_t> trace_lane_{0};
  std::atomic<std::int64_t> trace_start_ns_{0};
  std::atomic<std::int64_t> virtual_start_ns_{-1};  // the virtual span, when placed on a profile's clock
  std::atomic<std::int64_t> virtual_end_ns_{-1};
};

}  // namespace openreg::sim
