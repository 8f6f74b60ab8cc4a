// Bindings behind torch.openreg's torch.cuda-parity names: checking a Python device index, stream
// priorities, and the device busy time that utilization() samples. Bindings only: the logic lives in
// backend/runtime/.

#include "python/csrc/DeviceBindings.h"

#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"
#include "backend/engine/KernelCost.h"
#include "backend/engine/KernelRanges.h"
#include "backend/engine/OptimizerStep.h"
#include "backend/runtime/VirtualTime.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <Python.h>

#include <cstdint>
#include <limits>
#include <vector>

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

  // --- virtual time (torch.openreg.timing; Note [Virtual time] in sim/src/virtual_clock.cpp) ---
  // The device profile as a dict, or None when times are this host's.
  m.def("_device_profile", torch::wrap_pybind_function([]() -> py::object {
          const auto p = ore::device_profile();
          if (!p) return py::none();
          py::dict out;
          out["name"] = p->name;
          out["display_name"] = p->display_name;
          out["sm_count"] = p->sm_count;
          out["l2_bytes"] = p->l2_bytes;
          out["memory_bytes"] = p->memory_bytes;
          out["bf16_tensor_flops"] = p->bf16_tensor_flops;
          out["memory_bandwidth"] = p->memory_bandwidth;
          out["ranks_per_node"] = p->ranks_per_node;
          out["launch_us"] = p->launch_ns / 1e3;
          out["host_op_us"] = p->host_op_ns / 1e3;
          return out;
        }));
  // The modelled time of a kernel of `flops` and `bytes` in `dtype` (Inductor's runtime estimates), or
  // None without a profile.
  m.def("_modelled_kernel_ns", torch::wrap_pybind_function([](double flops, double bytes, at::ScalarType dtype,
                                                              bool matrix) -> py::object {
          const auto ns = at::openreg::modelled_kernel_ns(flops, bytes, dtype, matrix);
          if (!ns) return py::none();
          return py::float_(*ns);
        }));
  // A collective's modelled time (ns, algorithm), or None without a profile.
  m.def("_modelled_collective", torch::wrap_pybind_function([](const std::string& kind, double bytes,
                                                               std::int64_t ranks, std::int64_t nodes) -> py::object {
          const auto t = ore::modelled_collective(kind, bytes, static_cast<int>(ranks), static_cast<int>(nodes));
          if (!t) return py::none();
          return py::make_tuple(t->ns, t->algorithm);
        }));
  m.def("_timing_only", torch::wrap_pybind_function([] { return ore::timing_only_execution(); }));
  m.def("_timing_only_moved_bytes", [] { return ore::timing_only_moved_bytes(); });
  m.def("_timing_only_run_kernel_bytes", [] { return ore::timing_only_run_kernel_bytes(); });
  // Note [Values in timing-only execution]: what a collective that moved its data (or did not) wrote.
  m.def("_set_holds_values", torch::wrap_pybind_function([](const std::vector<at::Tensor>& tensors, bool holds) {
          for (const at::Tensor& t : tensors) at::openreg::set_holds_values(t, holds);
        }));
  m.def("_holds_values", torch::wrap_pybind_function([](const std::vector<at::Tensor>& tensors) {
          for (const at::Tensor& t : tensors) {
            if (!at::openreg::holds_values(t)) return false;
          }
          return true;
        }));
  // Note [Optimizer steps on the virtual clock] (backend/engine/KernelCost.cpp).
  m.def("_set_in_optimizer_step", [](bool inside) { at::openreg::set_in_optimizer_step(inside); });
  m.def("_virtual_now_ns", torch::wrap_pybind_function([] { return ore::virtual_now_ns(); }));
  m.def("_virtual_device_time", torch::wrap_pybind_function([](std::int64_t device) {
          const ore::VirtualDeviceTime t = ore::virtual_device_time(ore::checked_device_index(device));
          py::dict out;
          out["compute_busy_ns"] = t.compute_busy_ns;
          out["copy_busy_ns"] = t.copy_busy_ns;
          out["comm_busy_ns"] = t.comm_busy_ns;
          out["busy_ns"] = t.busy_ns;
          out["exposed_comm_ns"] = t.exposed_comm_ns;
          out["matmul_ns"] = t.matmul_ns;
          out["attention_ns"] = t.attention_ns;
          out["optimizer_ns"] = t.optimizer_ns;
          out["memory_bound_ns"] = t.memory_bound_ns;
          out["copy_alone_ns"] = t.copy_alone_ns;
          out["kernels"] = t.kernels;
          out["peak_ns"] = t.peak_ns;
          out["end_ns"] = t.end_ns;
          out["work_items"] = t.work_items;
          return out;
        }));
}
