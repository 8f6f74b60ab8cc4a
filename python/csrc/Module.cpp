// torch_openreg._C: Python bindings of the backend. Bindings only: every function forwards to
// backend/. Each is wrapped by torch::wrap_pybind_function(_no_gil), which turns c10 errors into the
// Python exceptions torch uses (torch.AcceleratorError, IndexError, ValueError, torch.OutOfMemoryError,
// RuntimeError); the _no_gil variants release the GIL while they wait on devices.

#include "backend/runtime/VirtualTime.h"
#include "backend/runtime/Exit.h"
#include "backend/memory/DeviceAllocator.h"
#include "backend/runtime/Fork.h"
#include "backend/runtime/Generator.h"
#include "backend/memory/HostAllocator.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/FormatBytes.h"
#include "backend/runtime/Trace.h"
#include "python/csrc/DeviceBindings.h"
#include "python/csrc/MemoryBindings.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace py = pybind11;

void bind_sync_debug(pybind11::module_& m);  // SyncDebugBindings.cpp
void bind_sanitizer(pybind11::module_& m);   // SanitizerBindings.cpp
void bind_compile(pybind11::module_& m);     // CompileBindings.cpp
void bind_distributed(pybind11::module_& m);  // DistributedBindings.cpp
void bind_host_wait(pybind11::module_& m);    // HostWaitBindings.cpp
void bind_graphs(pybind11::module_& m);       // GraphBindings.cpp

namespace {

namespace ore = c10::openreg;

// Python ints are checked whole before they become an int8 DeviceIndex: a plain cast made 256 device 0
// and 128 device -128.
c10::DeviceIndex to_index(std::int64_t device) {
  return ore::checked_device_index(device);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "openreg: bindings of the simulated accelerator backend";
  bind_sync_debug(m);
  bind_sanitizer(m);
  bind_compile(m);
  bind_distributed(m);
  bind_host_wait(m);
  bind_graphs(m);

  // --- runtime and devices ---
  m.def("_init", torch::wrap_pybind_function([] { ore::init(); }));
  m.def("_is_initialized", [] { return ore::is_runtime_initialized(); });
  m.def("_is_in_bad_fork", [] { return ore::is_in_bad_fork(); });
  m.def("_get_device_count", [] { return static_cast<int>(ore::device_count()); });
  m.def("_get_device", torch::wrap_pybind_function([] { return static_cast<int>(ore::current_device()); }));
  m.def("_set_device", torch::wrap_pybind_function([](std::int64_t device) { ore::set_device(to_index(device)); }));
  m.def("_exchange_device", torch::wrap_pybind_function([](std::int64_t device) {
          return static_cast<int>(ore::exchange_device(to_index(device)));
        }));
  m.def("_synchronize", torch::wrap_pybind_function_no_gil([](std::int64_t device) {
          ore::synchronize_device(to_index(device));
        }));
  m.def("_settle_autograd_threads", [] { ore::settle_autograd_device_threads(); },
        py::call_guard<py::gil_scoped_release>());
  m.def("_drain_at_exit", [] { ore::drain_at_exit(); }, py::call_guard<py::gil_scoped_release>());
  m.def("_format_bytes", [](std::uint64_t bytes) { return ore::format_bytes(bytes); });
  m.def("_get_device_properties", torch::wrap_pybind_function([](std::int64_t device) {
          const ore::DeviceProperties p = ore::device_properties(to_index(device));
          py::dict out;
          out["name"] = p.name;
          out["total_memory"] = p.total_memory;
          out["multi_processor_count"] = p.multi_processor_count;
          out["copy_bandwidth"] = p.copy_bandwidth;
          const auto profile = ore::device_profile();  // a model of a GPU: its L2 (Note [Virtual time])
          out["l2_cache_size"] = profile ? profile->l2_bytes : 0;
          return out;
        }));

  // --- random ---
  m.def("_get_default_generator", torch::wrap_pybind_function([](std::int64_t device) {
          const at::Generator& gen = ore::default_generator(to_index(device));
          return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
        }));

  // --- device memory (MemoryBindings.cpp) ---
  bind_memory(m);

  // --- pinned host memory ---
  m.def("_is_pinned_ptr", [](std::uintptr_t ptr) { return ore::is_pinned_ptr(reinterpret_cast<const void*>(ptr)); });

  bind_device(m);

  // --- device timeline (torch_openreg/openreg/_trace.py writes it as Chrome trace JSON) ---
  m.def("_trace_start", [] { ore::trace_start(); });
  // Returns [(name, device, stream, kind, start_ns, end_ns, bytes)], kind named by the backend
  // ("kernel", "copy", ...).
  m.def("_trace_stop", [] {
    std::vector<ore::TraceItem> items;
    {
      pybind11::gil_scoped_release no_gil;
      items = ore::trace_stop();
    }
    pybind11::list out(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& r = items[i];
      out[i] = pybind11::make_tuple(r.name, r.device, r.stream, r.kind, r.start_ns, r.end_ns, r.bytes);
    }
    return out;
  });
}
