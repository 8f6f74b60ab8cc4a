#include "openreg/sim/event.h"

#include <atomic>
#include <mutex>
#include <string>

#include "event_record.h"
#include "host_wait.h"
#include "internal_check.h"
#include "openreg/sim/error.h"
#include "openreg/sim/trace.h"
#include "trace_recorder.h"
#include "virtual_clock.h"

namespace openreg::sim {

// Note [Event records]
// Each Stream::record creates a fresh EventRecord: its own completion flag, timestamp, failure and
// waiter list. The event only points at its most recent record. Stream::wait captures that pointer
// at the call, so a wait is satisfied by exactly the record that was current when it was issued;
// later records replace the event's pointer but cannot touch a captured record (CUDA's rule: a wait
// is tied to the record most recent at cudaStreamWaitEvent, and records may complete out of order
// across streams and devices). query/synchronize/elapsed_ms look at the most recent record, as
// cudaEventQuery/Synchronize/ElapsedTime do. How a record completes and is waited on, by streams and
// by host threads alike, is EventRecord's (Note [Event record completion] in event_record.cpp).
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
  const int device = record->device();
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
  if (auto clock = record->clock()) clock->host_waited_record(*record);
  record->report_failure_once();
  return true;
}

bool Event::query_untimed() {
  std::shared_ptr<EventRecord> record = latest();
  if (!record) return true;
  if (!record->completed()) return false;
  // completed() is an acquire that pairs with the completer's release, and the record was placed
  // (set_virtual) before it was published or completed: its virtual time is readable here.
  if (auto clock = record->clock()) {
    if (record->virtual_ns() > clock->host_now() + clock->origin_ns()) return false;
  }
  record->report_failure_once();
  return true;
}

void Event::synchronize() { synchronize_impl(/*timed=*/true); }

void Event::synchronize_untimed() { synchronize_impl(/*timed=*/false); }

void Event::synchronize_impl(bool timed) {
  std::shared_ptr<EventRecord> record = latest();
  if (!record) return;
  {
    InterruptibleHostWait interruptible;  // Note [Interruptible host waits]
    record->wait();
  }
  if (timed) {
    if (auto clock = record->clock()) clock->host_waited_record(*record);
  }
  record->report_failure_once();
}

// Note [Host-completed records]
// A collective (torch.distributed) runs on a host thread, yet the stream the program continues on must
// wait for it without blocking the host, as it waits for a kernel. record_on_host makes a record that
// no stream item completes: it is the event's most recent record at once, so a Stream::wait issued
// afterwards captures it and parks (no worker thread held), and the host thread that runs the
// collective completes it through HostRecord. Completion is EventRecord::complete, the same call a
// stream's record item makes (Note [Event record completion] in event_record.cpp), made from the host
// thread: it publishes the failure and timestamp, and resumes each parked stream on its own device,
// never running it on the completing thread.
// Exactly one finish() completes a record (claimed_ exchange); a HostRecord dropped uncompleted fails
// its record, so a waiting stream reports an error instead of hanging. A failure travels like a
// failed item's recorded after a failure: query/synchronize of the event throw it once, and each
// stream whose wait it satisfies inherits it, naming the message (e.g. the collective that failed).
std::shared_ptr<HostRecord> Event::record_on_host(int device) {
  auto record = std::make_shared<EventRecord>(device, timing());
  set_latest(record);
  return std::shared_ptr<HostRecord>(new HostRecord(std::move(record)));
}

// Declared in event.h as HostRecord's way in; the protocol itself is EventRecord::complete.
void Event::complete_from_host(EventRecord& record, std::string failure) { record.complete(std::move(failure)); }

HostRecord::HostRecord(std::shared_ptr<EventRecord> record) : record_(std::move(record)) {}

HostRecord::~HostRecord() {
  finish("a host-completed event record was dropped before it was completed (abandoned)");
}

bool HostRecord::complete() { return finish(std::string()); }

bool HostRecord::fail(const std::string& message) {
  return finish(message.empty() ? std::string("host-completed record failed") : message);
}

bool HostRecord::completed() const noexcept { return record_->completed(); }

void HostRecord::set_trace(const char* name, std::int64_t lane) noexcept {
  trace_lane_.store(lane, std::memory_order_relaxed);  // published by the name's release store
  trace_name_.store(name, std::memory_order_release);
}

void HostRecord::mark_started() noexcept { trace_start_ns_.store(now_ns(), std::memory_order_release); }

void HostRecord::set_virtual_span(std::int64_t start, std::int64_t end, const std::shared_ptr<VirtualClock>& clock) noexcept {
  record_->set_virtual(end, clock);
  virtual_start_ns_.store(start, std::memory_order_relaxed);  // published by the end's release store
  virtual_end_ns_.store(end, std::memory_order_release);
}

bool HostRecord::finish(std::string failure) {
  // acq_rel: the winner's writes to the record must not be reordered before its claim; losers only
  // need to know they lost.
  if (claimed_.exchange(true, std::memory_order_acq_rel)) return false;
  // acquire: pairs with set_trace/mark_started, which may have run on another host thread.
  const char* name = trace_name_.load(std::memory_order_acquire);
  std::int64_t start = trace_start_ns_.load(std::memory_order_acquire);
  std::int64_t end = now_ns();
  // acquire: pairs with set_virtual_span. With a profile the span shown is the modelled one.
  if (const std::int64_t vend = virtual_end_ns_.load(std::memory_order_acquire); vend >= 0) {
    start = virtual_start_ns_.load(std::memory_order_relaxed);
    end = vend;
  }
  if (name != nullptr && start != 0 && trace_enabled()) {
    trace_record({name, record_->device(), trace_lane_.load(std::memory_order_relaxed), ItemKind::kHostCallback, start,
                  end, 0, kNoCorrelation, start});
  }
  Event::complete_from_host(*record_, std::move(failure));
  return true;
}

std::int64_t Event::virtual_time_ns() const {
  const std::shared_ptr<EventRecord> r = latest();
  if (!r || r->virtual_ns() < 0) return -1;
  const std::shared_ptr<VirtualClock> clock = r->clock();
  return clock ? r->virtual_ns() - clock->origin_ns() : -1;
}

double Event::elapsed_ms(const Event& end) const {
  if (!timing() || !end.timing()) {
    throw_error(Errc::kNotTimed, "elapsed time needs both events created with timing enabled");
  }
  std::shared_ptr<EventRecord> a = latest();
  std::shared_ptr<EventRecord> b = end.latest();
  if (!a || !b) throw_error(Errc::kNotRecorded, "elapsed time needs both events to have been recorded");
  if (a->device() != b->device()) {
    throw_error(Errc::kInvalidEvent, "elapsed time between events recorded on different devices (openreg:" +
                                         std::to_string(a->device()) + " and openreg:" +
                                         std::to_string(b->device()) + ")");
  }
  if (!a->completed() || !b->completed()) {
    throw_error(Errc::kNotReady, "elapsed time asked before both events' records have completed");
  }
  // Virtual times when both were placed on a device profile's clock (Note [Virtual time]).
  if (a->virtual_ns() >= 0 && b->virtual_ns() >= 0) return static_cast<double>(b->virtual_ns() - a->virtual_ns()) / 1e6;
  return static_cast<double>(b->time_ns() - a->time_ns()) / 1e6;  // published by completion (EventRecord)
}

}  // namespace openreg::sim
