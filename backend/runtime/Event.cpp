#include "backend/runtime/Event.h"

#include "backend/runtime/Capture.h"
#include "backend/runtime/SimErrors.h"

#include <openreg/sim/event.h>
#include <openreg/sim/stream.h>

namespace c10::openreg {

namespace sim = ::openreg::sim;

OpenRegEvent::OpenRegEvent(bool timing) : event_(sim::Event::create(timing)) {}

void OpenRegEvent::record(const OpenRegStream& stream) {
  // On a capturing stream the record stands for the captured point (Note [Stream capture]).
  if (capture::capture_underway() && capture::record_event(event_, stream)) return;
  translate_sim_errors([&] { stream.sim().record(event_); });
}

void OpenRegEvent::block(const OpenRegStream& stream) const {
  if (capture::capture_underway() && capture::wait_event(event_, stream)) return;
  translate_sim_errors([&] { stream.sim().wait(event_); });
}

bool OpenRegEvent::query() const {
  capture::check_event_wait(event_.get(), "Event.query()");
  return translate_sim_errors([&] { return event_->query(); });
}

void OpenRegEvent::synchronize() const {
  capture::check_event_wait(event_.get(), "Event.synchronize()");
  translate_sim_errors([&] { event_->synchronize(); });
}

double OpenRegEvent::elapsed_ms(const OpenRegEvent& end) const {
  return translate_sim_errors([&] { return event_->elapsed_ms(*end.event_); });
}

void wait_stream(const OpenRegStream& waiter, const OpenRegStream& producer) {
  if (waiter == producer) return;  // a stream is ordered after itself
  OpenRegEvent done;
  done.record(producer);
  done.block(waiter);
}

}  // namespace c10::openreg
