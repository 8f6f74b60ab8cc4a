// Bindings of graphs and memory pools (torch.openreg.graphs, torch.openreg.MemPool): registering the
// graph implementation torch.accelerator.Graph uses, whether a stream captures, pool handles, and the
// allocator's private pools. Bindings only: the logic lives in backend/registration/Graph.cpp,
// backend/runtime/Capture.cpp and backend/memory/.

#include "backend/memory/DeviceAllocator.h"
#include "backend/registration/Graph.h"
#include "backend/runtime/Capture.h"
#include "backend/runtime/Device.h"
#include "backend/runtime/Stream.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <utility>

namespace py = pybind11;

namespace {

namespace ore = c10::openreg;

c10::MempoolId_t pool_id(const std::pair<std::uint64_t, std::uint64_t>& id) {
  return {id.first, id.second};
}

}  // namespace

void bind_graphs(py::module_& m) {
  m.def("_register_graph_impl", torch::wrap_pybind_function(&ore::register_graph_impl));
  m.def("_graph_pool_handle", [] {
    const c10::MempoolId_t id = ore::graph_pool_handle();
    return std::make_pair(id.first, id.second);
  });
  m.def("_is_current_stream_capturing", torch::wrap_pybind_function([](std::int64_t device) {
          const c10::DeviceIndex index = ore::checked_device_index(device);
          return ore::capture::is_capturing(ore::current_openreg_stream(index));
        }));
  m.def("_mempool_create", torch::wrap_pybind_function([](std::int64_t device, std::pair<std::uint64_t, std::uint64_t> id) {
          ore::device_allocator().create_or_incref_pool(ore::checked_device_index(device), pool_id(id));
        }));
  m.def("_mempool_begin_thread", torch::wrap_pybind_function([](std::int64_t device, std::pair<std::uint64_t, std::uint64_t> id) {
          ore::device_allocator().begin_allocate_current_thread_to_pool(ore::checked_device_index(device), pool_id(id));
        }));
  m.def("_mempool_end", torch::wrap_pybind_function([](std::int64_t device, std::pair<std::uint64_t, std::uint64_t> id) {
          ore::device_allocator().end_allocate_to_pool(ore::checked_device_index(device), pool_id(id));
        }));
  m.def("_mempool_release", torch::wrap_pybind_function([](std::int64_t device, std::pair<std::uint64_t, std::uint64_t> id) {
          ore::device_allocator().release_pool(ore::checked_device_index(device), pool_id(id));
        }));
  m.def("_mempool_use_count", torch::wrap_pybind_function([](std::int64_t device, std::pair<std::uint64_t, std::uint64_t> id) {
          return ore::device_allocator().pool_use_count(ore::checked_device_index(device), pool_id(id));
        }));
}
