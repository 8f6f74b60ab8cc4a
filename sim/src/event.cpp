#include "openreg/sim/event.h"

#include <atomic>
#include <mutex>
#include <string>

#include "event_record.h"
#include "internal_check.h"
#include "openreg/sim/error.h"

namespace openreg::sim {

// Note [Event records]
// Each Stream::record creates a fresh EventRecord: its own completion flag, timestamp, failure and
// waiter list. The event only points at its most recent record. Stream::wait captures that pointer
// at the call, so a wait is satisfied by exactly the record that was current when it was issued;
// later records replace the event's pointer but cannot touch a captured record (CUDA's rule: a wait
// is tied to the record most recent at cudaStreamWaitEvent, and records may complete out of order
// across streams and devices). query/synchronize/elapsed_ms look at the most recent record, as
// cudaEventQuery/Synchronize/ElapsedTime do. Records are completed in Stream::complete_record and
// waited on in Stream::wait_or_park (stream.cpp), since both act on the stream's private state.
struct Event::State {
  bool timing = false;
  mutable std::mutex mutex;
  std::shared_ptr<EventRecord> latest;  // guarded by mutex; null until the first record
  std::atomic<bool> recorded{false};
  std::atomic<int> device{kNoDevice};
};

Event::Event(bool timing) : s_(std::make_unique<State>()) { s_->timing = timing; }
Event::~Event() = default;

std::shared_ptr<Event> Event::create(bool timing) { return std::shared_ptr<Event>(new Event(timing)); }

bool Event::timing() const noexcept { return s_->timing; }
// relaxed: informational flags; the record itself carries the ordering (its own counter).
bool Event::recorded() const noexcept { return s_->recorded.load(std::memory_order_relaxed); }
int Event::device_index() const noexcept { return s_->device.load(std::memory_order_relaxed); }

void Event::set_latest(std::shared_ptr<EventRecord> record) {
  const int device = record->device;
  {
    std::lock_guard lock(s_->mutex);
    s_->latest = std::move(record);
  }
  s_->device.store(device, std::memory_order_relaxed);
  s_->recorded.store(true, std::memory_order_relaxed);
}

std::shared_ptr<EventRecord> Event::latest() const {
  std::lock_guard lock(s_->mutex);
  return s_->latest;
}

bool Event::query() {
  std::shared_ptr<EventRecord> record = latest();
  if (!record) return true;
  if (!record->completed()) return false;
  // The failure is immutable once completed() (acquire); the exchange makes the report happen once.
  if (!record->failure.empty() && !record->failure_reported.exchange(true, std::memory_order_relaxed)) {
    throw Error(Errc::kWorkFailed, record->failure);
  }
  return true;
}

void Event::synchronize() {
  std::shared_ptr<EventRecord> record = latest();
  if (!record) return;
  record->done.wait_at_least(1);
  if (!record->failure.empty() && !record->failure_reported.exchange(true, std::memory_order_relaxed)) {
    throw Error(Errc::kWorkFailed, record->failure);
  }
}

double Event::elapsed_ms(const Event& end) const {
  if (!timing() || !end.timing()) {
    throw_error(Errc::kNotTimed, "elapsed time needs both events created with timing enabled");
  }
  std::shared_ptr<EventRecord> a = latest();
  std::shared_ptr<EventRecord> b = end.latest();
  if (!a || !b) throw_error(Errc::kNotRecorded, "elapsed time needs both events to have been recorded");
  if (a->device != b->device) {
    throw_error(Errc::kInvalidEvent, "elapsed time between events recorded on different devices (openreg:" +
                                         std::to_string(a->device) + " and openreg:" + std::to_string(b->device) + ")");
  }
  if (!a->completed() || !b->completed()) {
    throw_error(Errc::kNotReady, "elapsed time asked before both events' records have completed");
  }
  return static_cast<double>(b->time_ns - a->time_ns) / 1e6;  // published by done (see EventRecord)
}

}  // namespace openreg::sim
