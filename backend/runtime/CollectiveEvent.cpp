#include "backend/runtime/CollectiveEvent.h"

#include "backend/runtime/Capture.h"

#include <c10/util/Exception.h>

#include "backend/runtime/Device.h"
#include "backend/runtime/Observer.h"
#include "backend/runtime/SimErrors.h"
#include "backend/runtime/Stream.h"

#include <openreg/sim/event.h>
#include <openreg/sim/runtime.h>
#include <openreg/sim/stream.h>

namespace c10::openreg {

namespace sim = ::openreg::sim;

struct CollectiveEvent::State {
  c10::DeviceIndex device;
  std::shared_ptr<sim::Event> event;
  std::shared_ptr<sim::HostRecord> record;  // the event's only record, completed by the host
  std::shared_ptr<sim::Event> issued;       // recorded on the issuing stream (issue_on)
};

CollectiveEvent::CollectiveEvent(c10::DeviceIndex device) : s_(std::make_unique<State>()) {
  check_device_index(device);
  s_->device = device;
  s_->event = sim::Event::create(/*timing=*/false);
  s_->record = s_->event->record_on_host(device);
}

CollectiveEvent::~CollectiveEvent() = default;

std::int64_t CollectiveEvent::issue_on(const c10::Stream& stream) {
  const OpenRegStream s(stream);
  TORCH_CHECK(!s_->issued, "openreg: a collective is issued once");
  capture::check_not_capturing(s, "a collective");
  auto issued = sim::Event::create(/*timing=*/false);
  translate_sim_errors([&] { s.sim().record(issued); });
  s_->issued = issued;
  return issued->virtual_time_ns();
}

void CollectiveEvent::wait_issued() {
  // Untimed: the communication thread's wait is not the program's (Event::synchronize_untimed).
  if (s_->issued) translate_sim_errors([&] { s_->issued->synchronize_untimed(); });
}

void CollectiveEvent::place(std::int64_t start_ns, std::int64_t end_ns) {
  translate_sim_errors([&] { detail::started_runtime().place_communication(s_->device, start_ns, end_ns, s_->record.get()); });
}

void CollectiveEvent::block(const c10::Stream& stream) {
  const OpenRegStream s(stream);
  translate_sim_errors([&] { s.sim().wait(s_->event); });
  // The stream is ordered after the collective (Note [The runtime reports to its observer]).
  if (RuntimeObserver* observer = runtime_observer()) observer->on_event_wait(this, stream);
}

bool CollectiveEvent::complete() { return s_->record->complete(); }

bool CollectiveEvent::fail(const std::string& message) { return s_->record->fail(message); }

bool CollectiveEvent::completed() const noexcept { return s_->record->completed(); }

void CollectiveEvent::synchronize() {
  translate_sim_errors([&] { s_->event->synchronize(); });
  if (RuntimeObserver* observer = runtime_observer()) observer->on_event_done(this);  // the host saw it end
}

std::shared_ptr<sim::Event> CollectiveEvent::end_event() const noexcept { return s_->event; }

void CollectiveEvent::set_trace(const std::string& name, c10::StreamId lane) {
  s_->record->set_trace(sim::intern_name(name.c_str()), lane);
}

void CollectiveEvent::mark_started() noexcept { s_->record->mark_started(); }

c10::DeviceIndex CollectiveEvent::device() const noexcept { return s_->device; }

}  // namespace c10::openreg
