// Bindings behind torch.openreg's torch.cuda-parity names: checking a Python device index, stream
// priorities, and the device busy time that utilization() samples. Bindings only: the logic lives in
// backend/runtime/.

#include "python/csrc/DeviceBindings.h"

#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <Python.h>

#include <cstdint>
#include <limits>

namespace py = pybind11;

namespace {
namespace ore = c10::openreg;
}  // namespace

void bind_device(py::module_& m) {
  // Raises torch.AcceleratorError unless `index` (any Python int) names a device. Ints beyond int64 are
  // reported as the nearest int64: they are out of range either way.
  m.def("_check_device_index", torch::wrap_pybind_function([](const py::int_& index) {
          int overflow = 0;
          long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
          if (overflow != 0) {
            value = overflow > 0 ? std::numeric_limits<long long>::max() : std::numeric_limits<long long>::min();
          }
          ore::checked_device_index(static_cast<std::int64_t>(value));
        }));
  // (least, greatest) in CUDA's convention: lower numbers are higher priorities.
  m.def("_stream_priority_range",
        [] { return py::make_tuple(ore::kLeastStreamPriority, ore::kGreatestStreamPriority); });
  m.def("_stream_priority", torch::wrap_pybind_function([](std::int64_t device, std::int64_t stream_id) {
          const c10::Stream stream(c10::Stream::UNSAFE,
                                   c10::Device(c10::DeviceType::PrivateUse1, ore::checked_device_index(device)),
                                   static_cast<c10::StreamId>(stream_id));
          return ore::stream_priority(stream);
        }));
  // Nanoseconds the device has spent running work since it started (utilization() samples it).
  m.def("_device_busy_time_ns", torch::wrap_pybind_function([](std::int64_t device) {
          return ore::device_busy_time_ns(ore::checked_device_index(device));
        }));
}
