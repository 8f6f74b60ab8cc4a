#include "openreg/sim/event.h"

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "internal_check.h"
#include "openreg/sim/error.h"
#include "openreg/sim/stream.h"
#include "openreg/sim/trace.h"
#include "progress_counter.h"

namespace openreg::sim {

// Records are numbered 1, 2, ... when enqueued. `completed` holds the highest number whose record has
// run (records on different streams may complete out of order; the event reflects the newest, like
// CUDA's). A wait captures the number current at Stream::wait and is satisfied once completed >= it.
struct Event::State {
  bool timing = false;
  std::atomic<std::uint64_t> record_seq{0};  // last number handed out
  ProgressCounter completed;                 // advanced under `mutex` only
  std::atomic<int> device{kNoDevice};
  std::atomic<std::int64_t> time_ns{0};  // when record `completed` ran; written before `completed`

  std::mutex mutex;
  struct Waiter {
    std::uint64_t seq;
    Stream* stream;  // parked; kept alive by its own self-reference
    WorkItem* item;
  };
  std::vector<Waiter> waiters;  // guarded by mutex
  std::string error;            // unreported failure seen by a record; guarded by mutex
  std::atomic<bool> has_error{false};
};

Event::Event(bool timing) : s_(std::make_unique<State>()) { s_->timing = timing; }
Event::~Event() = default;

std::shared_ptr<Event> Event::create(bool timing) { return std::shared_ptr<Event>(new Event(timing)); }

bool Event::timing() const noexcept { return s_->timing; }
bool Event::recorded() const noexcept { return s_->record_seq.load(std::memory_order_acquire) != 0; }
int Event::device_index() const noexcept { return s_->device.load(std::memory_order_relaxed); }
std::uint64_t Event::next_record_seq() noexcept { return s_->record_seq.fetch_add(1, std::memory_order_acq_rel) + 1; }
std::uint64_t Event::last_record_seq() const noexcept { return s_->record_seq.load(std::memory_order_acquire); }
// relaxed: informational; the record item itself carries the ordering.
void Event::set_device(int index) noexcept { s_->device.store(index, std::memory_order_relaxed); }

void Event::complete_record(std::uint64_t seq, Stream& stream) {
  State& s = *s_;
  std::string failure;
  const bool failed = stream.peek_error(&failure);
  const std::int64_t t = s.timing ? now_ns() : 0;
  std::vector<State::Waiter> ready;
  {
    std::lock_guard lock(s.mutex);
    if (failed && s.error.empty()) {
      s.error = std::move(failure);
      s.has_error.store(true, std::memory_order_release);
    }
    if (seq > s.completed.load()) {
      s.time_ns.store(t, std::memory_order_relaxed);  // published by the release in advance_to
      s.completed.advance_to(seq);
    }
    if (!s.waiters.empty()) {
      std::uint64_t done = s.completed.load();
      auto keep = s.waiters.begin();
      for (auto& w : s.waiters) {
        if (w.seq <= done) ready.push_back(w);
        else *keep++ = w;
      }
      s.waiters.erase(keep, s.waiters.end());
    }
  }
  // Outside the lock: resuming schedules streams, possibly on other devices.
  for (auto& w : ready) w.stream->resume(w.item);
}

bool Event::ready_or_park(std::uint64_t seq, Stream& stream, WorkItem* item) {
  State& s = *s_;
  if (s.completed.load() >= seq) return true;
  std::lock_guard lock(s.mutex);  // completions advance under it, so the check and the park are atomic
  if (s.completed.load() >= seq) return true;
  s.waiters.push_back({seq, &stream, item});
  return false;
}

bool Event::query() {
  const bool done = s_->completed.load() >= s_->record_seq.load(std::memory_order_acquire);
  if (s_->has_error.load(std::memory_order_acquire)) {
    std::string message;
    {
      std::lock_guard lock(s_->mutex);
      message = std::move(s_->error);
      s_->error.clear();
      s_->has_error.store(false, std::memory_order_relaxed);  // relaxed: the mutex orders writers
    }
    if (!message.empty()) throw Error(Errc::kWorkFailed, message);
  }
  return done;
}

void Event::synchronize() {
  s_->completed.wait_at_least(s_->record_seq.load(std::memory_order_acquire));
  query();
}

double Event::elapsed_ms(const Event& end) const {
  if (!timing() || !end.timing()) {
    throw_error(Errc::kNotTimed, "elapsed time needs both events created with timing enabled");
  }
  if (!recorded() || !end.recorded()) {
    throw_error(Errc::kNotRecorded, "elapsed time needs both events to have been recorded");
  }
  if (device_index() != end.device_index()) {
    throw_error(Errc::kInvalidEvent, "elapsed time between events recorded on different devices (openreg:" +
                                         std::to_string(device_index()) + " and openreg:" +
                                         std::to_string(end.device_index()) + ")");
  }
  auto complete = [](const Event& e) { return e.s_->completed.load() >= e.s_->record_seq.load(std::memory_order_acquire); };
  if (!complete(*this) || !complete(end)) {
    throw_error(Errc::kNotReady, "elapsed time asked before both events' records have completed");
  }
  const std::int64_t a = s_->time_ns.load(std::memory_order_relaxed);
  const std::int64_t b = end.s_->time_ns.load(std::memory_order_relaxed);
  return static_cast<double>(b - a) / 1e6;
}

}  // namespace openreg::sim
