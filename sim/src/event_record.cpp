// Note [Event record completion]
// The protocol every event record follows, whoever completes it (a stream's record item, run by that
// stream's owner in Stream::complete_record, or a host thread through HostRecord, Note [Host-completed
// records] in event.cpp) and whoever waits (a stream's owner reaching a wait item, Stream::wait_or_park,
// or a host thread in Event::synchronize):
//  - One completer. complete() runs exactly once per record: a record item runs once, and of a
//    HostRecord's complete/fail/destructor only the one that wins its claim calls it. Only that thread
//    advances done_ (ProgressCounter allows one advancer at a time).
//  - Publication. The completer writes failure_ and time_ns_ first, then advances done_ 0 -> 1 with a
//    seq_cst store; they are never written again. A thread that loads done_ == 1 (acquire: completed(),
//    wait()) therefore reads them without the mutex, and so does a stream the completer resumes.
//  - No lost wake-up. A stream's owner that finds done_ == 0 takes mutex_, checks again and only then
//    appends itself to waiters_; the completer advances done_ and takes the list under the same mutex.
//    So a concurrent wait_or_park either sees done_ == 1 or is in the list the completer takes, never
//    neither. The first check, without the mutex, is only the fast path for a completed record.
//  - Who wakes whom. While parked, the stream is owned by the record: its current item (the wait)
//    sits in waiters_, and the stream keeps itself alive through its `self` (Note [Stream scheduling]
//    in stream.cpp). The completer takes the list, then resumes each stream outside the mutex:
//    Stream::resume completes the wait item (the stream takes over the record's failure first,
//    Stream::inherit_failure) and schedules the stream on its own device, never running it on the
//    completing thread, so chains of waiting streams neither recurse nor run under a record's lock.
//    Host threads blocked in wait() sleep on done_ itself, whose increment wakes them (their target, 1,
//    is reached: Note [Waking only satisfied waiters] in progress_counter.h).
//  - Lifetime. The completer and each waiter hold their own reference to the record; resuming a waiter
//    drops the waiter's, so after taking the list complete() works only on its local copy.
//  - Reporting. A failed record is reported once through its event (report_failure_once: the exchange
//    only decides who reports; the message is ordered by done_), and by every stream whose wait it
//    satisfies (Note [Failure reporting] in stream.cpp).
//  - Timing. A timing record is stamped by its completer just before done_ advances, so elapsed_ms
//    between two completed records reads two published timestamps.

#include "event_record.h"

#include <utility>

#include "internal_check.h"
#include "openreg/sim/error.h"
#include "openreg/sim/stream.h"
#include "openreg/sim/trace.h"

namespace openreg::sim {

void EventRecord::complete(std::string failure) {
  failure_ = std::move(failure);
  if (timing_) time_ns_ = now_ns();
  std::vector<Waiter> ready;
  {
    std::lock_guard lock(mutex_);
    done_.increment();  // publishes time_ns_ and failure_ (seq_cst store)
    ready.swap(waiters_);
  }
  // Outside the lock, and without touching *this: resuming schedules streams, possibly on other devices.
  for (const Waiter& w : ready) (w.stream->*w.resume)(w.item);
}

bool EventRecord::wait_or_park(const Waiter& waiter) {
  if (completed()) return true;
  std::lock_guard lock(mutex_);  // completion happens under it: the check and the park are atomic
  if (completed()) return true;
  waiters_.push_back(waiter);
  return false;
}

const std::string& EventRecord::failure() const noexcept {
  OPENREG_SIM_ASSERT(completed(), "an event record's failure read before it completed");
  return failure_;
}

std::int64_t EventRecord::time_ns() const noexcept {
  OPENREG_SIM_ASSERT(completed(), "an event record's time read before it completed");
  return time_ns_;
}

void EventRecord::report_failure_once() {
  // relaxed: the exchange only makes the report happen once; failure() is ordered by done_.
  if (!failure().empty() && !failure_reported_.exchange(true, std::memory_order_relaxed)) {
    throw Error(Errc::kWorkFailed, failure_);
  }
}

}  // namespace openreg::sim
