#pragma once
// Event: marks a point in a stream. Recording enqueues a marker; the event completes when its most
// recent marker runs. A stream wait is tied to the marker most recent at the call (Note [Event records]). Streams on any device can wait on it; host threads can query or block on it.
//
// Thread-safety: every member function may be called from any thread concurrently. Streams keep a
// reference to events they record or wait on, so dropping the last user reference is always safe.

#include <cstdint>
#include <memory>

#include "openreg/sim/export.h"

namespace openreg::sim {

class Stream;
struct WorkItem;     // private to the library
struct EventRecord;  // private to the library

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

  //! Blocks until the most recent record completes (returns at once if never recorded); short spin,
  //! then a futex wait. Throws like query().
  void synchronize();

  //! Milliseconds between this event's completed record and `end`'s. Throws kNotTimed if either was
  //! created without timing, kNotRecorded if either was never recorded, kNotReady if either's record
  //! has not completed yet (like cudaEventElapsedTime).
  double elapsed_ms(const Event& end) const;

  // --- implementation-defined below ---
 private:
  friend class Stream;
  struct State;
  explicit Event(bool timing);
  // For Stream::record (after the record item is enqueued): makes `record` the most recent one.
  void set_latest(std::shared_ptr<EventRecord> record);
  // For Stream::wait: the most recent record at this moment, or null if never recorded.
  std::shared_ptr<EventRecord> latest() const;

  std::unique_ptr<State> s_;
};

}  // namespace openreg::sim
