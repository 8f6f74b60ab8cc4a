// Bindings for torch.distributed on openreg (python/torch_openreg/distributed): the event a collective
// completes from its communication thread, which streams wait on without blocking the host
// (Note [Host-completed records] in sim/src/event.cpp, Note [Stream-ordered collectives] in
// python/torch_openreg/_distributed.py).

#include "backend/OpenRegRuntime.h"
#include "backend/OpenRegStream.h"

#include <c10/core/Stream.h>
#include <openreg/sim/event.h>
#include <openreg/sim/stream.h>

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

namespace py = pybind11;

namespace {

namespace ore = c10::openreg;
namespace sim = ::openreg::sim;

// One collective's end: pending from creation until the communication thread calls complete() or
// fail(). Dropped uncompleted, it fails (sim::HostRecord's destructor), so no stream waits forever.
class CollectiveEvent {
 public:
  explicit CollectiveEvent(std::int64_t device)
      : device_(ore::checked_device_index(device)),
        event_(sim::Event::create(/*timing=*/false)),
        record_(event_->record_on_host(device_)) {}

  // Work enqueued on `stream` from now on runs after the collective (device-side; the host goes on).
  void block(std::int64_t stream_id, std::int64_t device_index, std::int64_t device_type) {
    const ore::OpenRegStream s(c10::Stream::unpack3(stream_id, static_cast<c10::DeviceIndex>(device_index),
                                                    static_cast<c10::DeviceType>(device_type)));
    ore::translate_sim_errors([&] { s.sim().wait(event_); });
  }
  bool complete() { return record_->complete(); }
  bool fail(const std::string& message) { return record_->fail(message); }
  // Whether the collective has ended (successfully or not); never throws.
  bool completed() const noexcept { return record_->completed(); }
  // Blocks until it ends; raises its failure (once).
  void synchronize() {
    ore::translate_sim_errors([&] { event_->synchronize(); });
  }
  int device() const noexcept { return device_; }
  // The collective's span on the device timeline, on `lane` (a stream id of the device).
  void set_trace(const std::string& name, std::int64_t lane) {
    record_->set_trace(sim::intern_name(name.c_str()), lane);
  }
  void mark_started() noexcept { record_->mark_started(); }

 private:
  c10::DeviceIndex device_;
  std::shared_ptr<sim::Event> event_;
  std::shared_ptr<sim::HostRecord> record_;
};

}  // namespace

void bind_distributed(pybind11::module_& m) {
  py::class_<CollectiveEvent, std::shared_ptr<CollectiveEvent>>(m, "_CollectiveEvent")
      .def(py::init(torch::wrap_pybind_function([](std::int64_t device) {
        return std::make_shared<CollectiveEvent>(device);
      })))
      .def("block", torch::wrap_pybind_function(&CollectiveEvent::block))
      .def("complete", &CollectiveEvent::complete, py::call_guard<py::gil_scoped_release>())
      .def("fail", &CollectiveEvent::fail, py::call_guard<py::gil_scoped_release>())
      .def("completed", &CollectiveEvent::completed)
      .def("synchronize", torch::wrap_pybind_function_no_gil(&CollectiveEvent::synchronize))
      .def("set_trace", &CollectiveEvent::set_trace)
      .def("mark_started", &CollectiveEvent::mark_started)
      .def_property_readonly("device", &CollectiveEvent::device);
}
