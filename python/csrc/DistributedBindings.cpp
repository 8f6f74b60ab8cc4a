// Bindings for torch.distributed on openreg (python/torch_openreg/_distributed/_comm_queue.py): the end
// of a collective, which the communication thread completes and streams wait on without blocking the
// host (backend/runtime/CollectiveEvent.h).

#include "backend/memory/DeviceAllocator.h"
#include "backend/runtime/CollectiveEvent.h"
#include "backend/runtime/Device.h"

#include <c10/core/Stream.h>

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

namespace py = pybind11;

namespace {
//! A torch.Stream as Python passes it: (stream_id, device_index, device_type).
c10::Stream stream_of(std::int64_t stream_id, std::int64_t device_index, std::int64_t device_type) {
  return c10::Stream::unpack3(stream_id, static_cast<c10::DeviceIndex>(device_index),
                              static_cast<c10::DeviceType>(device_type));
}
}  // namespace

void bind_distributed(pybind11::module_& m) {
  using c10::openreg::CollectiveEvent;
  py::class_<CollectiveEvent, std::shared_ptr<CollectiveEvent>>(m, "_CollectiveEvent")
      .def(py::init(torch::wrap_pybind_function([](std::int64_t device) {
        return std::make_shared<CollectiveEvent>(c10::openreg::checked_device_index(device));
      })))
      // A torch.Stream's (stream_id, device_index, device_type).
      .def("block", torch::wrap_pybind_function([](CollectiveEvent& self, std::int64_t stream_id,
                                                   std::int64_t device_index, std::int64_t device_type) {
             self.block(stream_of(stream_id, device_index, device_type));
           }))
      .def("issue_on", torch::wrap_pybind_function([](CollectiveEvent& self, std::int64_t stream_id,
                                                      std::int64_t device_index, std::int64_t device_type) {
             return self.issue_on(stream_of(stream_id, device_index, device_type));
           }))
      .def("wait_issued", torch::wrap_pybind_function_no_gil([](CollectiveEvent& self) { self.wait_issued(); }))
      .def("place", torch::wrap_pybind_function([](CollectiveEvent& self, std::int64_t start_ns, std::int64_t end_ns) {
             self.place(start_ns, end_ns);
           }))
      .def("complete", &CollectiveEvent::complete, py::call_guard<py::gil_scoped_release>())
      .def("fail", &CollectiveEvent::fail, py::call_guard<py::gil_scoped_release>())
      .def("completed", &CollectiveEvent::completed)
      .def("synchronize", torch::wrap_pybind_function_no_gil([](CollectiveEvent& self) { self.synchronize(); }))
      .def("set_trace", torch::wrap_pybind_function([](CollectiveEvent& self, const std::string& name,
                                                       std::int64_t lane) { self.set_trace(name, lane); }))
      .def("mark_started", &CollectiveEvent::mark_started)
      // The tensor's block is reused only after the collective ends; its bytes leave the allocated
      // count when the program frees it (OpenRegDeviceAllocator::hold_until).
      .def("hold", torch::wrap_pybind_function([](const CollectiveEvent& self, const at::Tensor& t) {
             c10::openreg::device_allocator().hold_until(t.storage().data_ptr(), self);
           }))
      .def_property_readonly("device", [](const CollectiveEvent& self) { return static_cast<int>(self.device()); });
}
