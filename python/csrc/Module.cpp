// torch_openreg._C: Python bindings of the backend. Bindings only: every function forwards to
// backend/. Each is wrapped by torch::wrap_pybind_function(_no_gil), which turns c10 errors into the
// Python exceptions torch uses (torch.AcceleratorError, IndexError, ValueError, torch.OutOfMemoryError,
// RuntimeError); the _no_gil variants release the GIL while they wait on devices.

#include "backend/OpenRegAllocator.h"
#include "backend/OpenRegFork.h"
#include "backend/OpenRegGenerator.h"
#include "backend/OpenRegHostAllocator.h"
#include "backend/OpenRegRuntime.h"
#include "python/csrc/DeviceBindings.h"

#include <openreg/sim/trace.h>

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace py = pybind11;

namespace {

namespace ore = c10::openreg;
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;

// Python ints are checked whole before they become an int8 DeviceIndex: a plain cast made 256 device 0
// and 128 device -128.
c10::DeviceIndex to_index(std::int64_t device) {
  return ore::checked_device_index(device);
}

// Flattens DeviceStats with torch.cuda.memory_stats()'s key names ("allocated_bytes.all.current").
py::dict flat_memory_stats(const c10::CachingDeviceAllocator::DeviceStats& stats) {
  py::dict out;
  const auto add_stat = [&](const std::string& name, const Stat& s) {
    out[py::str(name + ".current")] = s.current;
    out[py::str(name + ".peak")] = s.peak;
    out[py::str(name + ".allocated")] = s.allocated;
    out[py::str(name + ".freed")] = s.freed;
  };
  const auto add_array = [&](const std::string& name, const StatArray& a) {
    add_stat(name + ".all", a[0]);
    add_stat(name + ".small_pool", a[1]);
    add_stat(name + ".large_pool", a[2]);
  };
  add_array("allocation", stats.allocation);
  add_array("segment", stats.segment);
  add_array("active", stats.active);
  add_array("inactive_split", stats.inactive_split);
  add_array("allocated_bytes", stats.allocated_bytes);
  add_array("reserved_bytes", stats.reserved_bytes);
  add_array("active_bytes", stats.active_bytes);
  add_array("inactive_split_bytes", stats.inactive_split_bytes);
  add_array("requested_bytes", stats.requested_bytes);
  add_stat("oversize_allocations", stats.oversize_allocations);
  add_stat("oversize_segments", stats.oversize_segments);
  out["num_alloc_retries"] = stats.num_alloc_retries;
  out["num_ooms"] = stats.num_ooms;
  out["num_sync_all_streams"] = stats.num_sync_all_streams;
  out["num_device_alloc"] = stats.num_device_alloc;
  out["num_device_free"] = stats.num_device_free;
  out["max_split_size"] = stats.max_split_size;
  return out;
}

c10::CachingDeviceAllocator::DeviceStats stats_of(std::int64_t device) {
  return ore::device_allocator().getDeviceStats(to_index(device));
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "openreg: bindings of the simulated accelerator backend";

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
  m.def("_get_device_properties", torch::wrap_pybind_function([](std::int64_t device) {
          const ore::DeviceProperties p = ore::device_properties(to_index(device));
          py::dict out;
          out["name"] = p.name;
          out["total_memory"] = p.total_memory;
          out["multi_processor_count"] = p.multi_processor_count;
          out["copy_bandwidth"] = p.copy_bandwidth;
          return out;
        }));

  // --- random ---
  m.def("_get_default_generator", torch::wrap_pybind_function([](std::int64_t device) {
          const at::Generator& gen = ore::default_generator(to_index(device));
          return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
        }));

  // --- device memory ---
  m.def("_memory_stats",
        torch::wrap_pybind_function([](std::int64_t device) { return flat_memory_stats(stats_of(device)); }));
  m.def("_memory_allocated", torch::wrap_pybind_function([](std::int64_t device) {
          return stats_of(device).allocated_bytes[0].current;
        }));
  m.def("_max_memory_allocated", torch::wrap_pybind_function([](std::int64_t device) {
          return stats_of(device).allocated_bytes[0].peak;
        }));
  m.def("_memory_reserved", torch::wrap_pybind_function([](std::int64_t device) {
          return stats_of(device).reserved_bytes[0].current;
        }));
  m.def("_max_memory_reserved", torch::wrap_pybind_function([](std::int64_t device) {
          return stats_of(device).reserved_bytes[0].peak;
        }));
  m.def("_reset_peak_memory_stats", torch::wrap_pybind_function([](std::int64_t device) {
          ore::device_allocator().resetPeakStats(to_index(device));
        }));
  m.def("_reset_accumulated_memory_stats", torch::wrap_pybind_function([](std::int64_t device) {
          ore::device_allocator().resetAccumulatedStats(to_index(device));
        }));
  m.def("_empty_cache", torch::wrap_pybind_function_no_gil([] { ore::device_allocator().emptyCache(); }));
  m.def("_mem_get_info", torch::wrap_pybind_function([](std::int64_t device) {
          return ore::device_allocator().getMemoryInfo(to_index(device));  // (free, total)
        }));

  // --- pinned host memory ---
  m.def("_is_pinned_ptr", [](std::uintptr_t ptr) { return ore::is_pinned_ptr(reinterpret_cast<const void*>(ptr)); });

  bind_device(m);

  // --- device timeline (torch_openreg/trace.py writes it as Chrome trace JSON) ---
  m.def("_trace_start", [] { ::openreg::sim::trace_start(); });
  // Returns [(name, device, stream, kind, start_ns, end_ns, bytes)], kind numbered as sim::ItemKind.
  m.def("_trace_stop", [] {
    std::vector<::openreg::sim::TraceRecord> records;
    {
      pybind11::gil_scoped_release no_gil;
      records = ::openreg::sim::trace_stop();
    }
    pybind11::list out(records.size());
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      out[i] = pybind11::make_tuple(r.name, r.device, r.stream, static_cast<int>(r.kind), r.start_ns, r.end_ns,
                                    r.bytes);
    }
    return out;
  });
}
