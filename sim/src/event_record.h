#pragma once
// EventRecord: ONE record of an event (Note [Event records] in event.cpp) and the protocol that
// completes it and waits on it (Note [Event record completion] in event_record.cpp): the only place
// that knows what completion publishes, who is woken, and how a wait checks or parks without losing a
// wake-up. Shared by the event (as its most recent record), its one completer (a stream's record item
// or a HostRecord), and every wait item that captured it; freed when the last of them lets go.
// What is a stream's own stays in Stream: which failure a record it runs carries
// (Stream::complete_record) and how a satisfied wait takes that failure over (Stream::inherit_failure).

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "progress_counter.h"

namespace openreg::sim {

class Stream;
class VirtualClock;
struct WorkItem;

class EventRecord {
 public:
  //! `device` is the record's device (Event::device_index, elapsed_ms); `timing`: stamp the completion.
  EventRecord(int device, bool timing) noexcept : device_(device), timing_(timing) {}
  EventRecord(const EventRecord&) = delete;
  EventRecord& operator=(const EventRecord&) = delete;

  int device() const noexcept { return device_; }
  //! acquire (ProgressCounter::load): true makes failure() and time_ns() readable without the mutex.
  bool completed() const noexcept { return done_.load() != 0; }

  //! A stream parked on this record: its owner's current item is the wait, and `resume` continues it.
  //! Stream::resume is private; the stream hands it over when it parks, so the record can call it.
  struct Waiter {
    Stream* stream;  // kept alive by its own self-reference (it owns itself while parked)
    WorkItem* item;  // the wait item; owned by the record's waiter list until resumed
    void (Stream::*resume)(WorkItem*);
  };

  //! Completes the record: publishes `failure` (empty: none) and, for a timing record, a timestamp,
  //! then resumes every stream parked on it. Called exactly once, by the record's one completer.
  void complete(std::string failure);

  //! For a stream's owner reaching a wait on this record: true if the record has completed (the wait is
  //! satisfied now); otherwise parks `waiter` and returns false, and ownership of the stream has passed
  //! to the record (its completer resumes it): the caller must not touch the stream any more.
  bool wait_or_park(const Waiter& waiter);

  //! Blocks the calling host thread until the record completes (ProgressCounter: short spin, then a
  //! futex sleep; interruptible inside an InterruptibleHostWait).
  void wait() const { done_.wait_at_least(1); }

  // Completed records only (completed() or wait() returned): immutable from then on.
  //! The failure the record carries, or empty.
  const std::string& failure() const noexcept;
  //! When it completed (now_ns()); 0 unless timing.
  std::int64_t time_ns() const noexcept;
  //! Its virtual time and clock (Note [Virtual time]): set once when it is placed, before it is
  //! published to waiters (Event::set_latest orders both); -1 and none without a device profile.
  void set_virtual(std::int64_t t, std::weak_ptr<VirtualClock> clock) noexcept {
    clock_ = std::move(clock);
    virtual_ns_.store(t, std::memory_order_relaxed);
  }
  std::int64_t virtual_ns() const noexcept { return virtual_ns_.load(std::memory_order_relaxed); }
  //! The clock that placed it, if still alive (its runtime may be gone).
  std::shared_ptr<VirtualClock> clock() const noexcept { return clock_.lock(); }
  //! Throws WorkFailed with the record's failure, the first time only: an event reports it once, however
  //! many query/synchronize calls see this record (waiting streams copy it regardless).
  void report_failure_once();

 private:
  const int device_;
  const bool timing_;

  // Written by the completer before done_ advances to 1 and never again (Note [Event record completion]).
  std::int64_t time_ns_ = 0;
  std::string failure_;
  ProgressCounter done_;  // 0 -> 1 when the record completes

  std::atomic<bool> failure_reported_{false};
  std::atomic<std::int64_t> virtual_ns_{-1};
  std::weak_ptr<VirtualClock> clock_;  // written once before publication

  std::mutex mutex_;              // makes "check done_, else park" atomic with completion
  std::vector<Waiter> waiters_;  // guarded by mutex_
};

}  // namespace openreg::sim
