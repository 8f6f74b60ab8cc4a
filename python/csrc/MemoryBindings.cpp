// Bindings of what torch.accelerator.memory_* lacks for the caching device allocator (statistics, peaks,
// empty_cache and mem_get_info go through torch.accelerator to the registered allocator): the per-process memory
// fraction, raw allocations (caching_allocator_alloc), history recording and snapshots shaped like
// torch.cuda.memory._snapshot() so torch.cuda._memory_viz renders them. Bindings only: the logic lives
// in backend/memory/DeviceAllocator.*.

#include "python/csrc/MemoryBindings.h"

#include "backend/memory/DeviceAllocator.h"
#include "backend/runtime/Device.h"
#include "backend/memory/HostDestinations.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace py = pybind11;

// From torch/csrc/profiler/python/combined_traceback.h (libtorch_python), whose header needs
// nlohmann/json, which the torch wheel does not ship.
namespace torch {
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
void installCapturedTracebackPython();
}  // namespace torch

namespace {

namespace ore = c10::openreg;
using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::TraceEntry;

// Python ints are checked whole before they narrow to an int8 DeviceIndex (AcceleratorError when out of range).
c10::DeviceIndex to_index(std::int64_t device) {
  return ore::checked_device_index(device);
}

// Stack gatherers for record_history: called on the allocating (or freeing) thread outside the
// allocator's locks. Python frames are gathered only on Python threads (which ops run with the GIL
// released, so gathering takes it back, as CUDA's allocator does); device threads, where deleters may
// run, have no Python frames and must never wait for the GIL.
bool on_python_thread() {
  return PyGILState_GetThisThreadState() != nullptr;
}
std::shared_ptr<c10::GatheredContext> gather_python() {
  if (!on_python_thread()) return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/false);
}
std::shared_ptr<c10::GatheredContext> gather_all() {
  return torch::CapturedTraceback::gather(/*python=*/on_python_thread(), /*script=*/true, /*cpp=*/true);
}

void record_memory_history(const std::optional<std::string>& enabled, const std::optional<std::string>& context,
                           const std::string& stacks, std::size_t max_entries, bool clear_history) {
  TORCH_CHECK_VALUE(!enabled || *enabled == "state" || *enabled == "all",
                    "enabled must be None, 'state' or 'all', got ", *enabled);
  TORCH_CHECK_VALUE(!context || *context == "state" || *context == "alloc" || *context == "all",
                    "context must be None, 'state', 'alloc' or 'all', got ", *context);
  TORCH_CHECK_VALUE(stacks == "python" || stacks == "all", "stacks must be 'python' or 'all', got ", stacks);
  RecordContext when = RecordContext::NEVER;
  if (context) {
    when = *context == "state" ? RecordContext::STATE
           : *context == "alloc" ? RecordContext::ALLOC
                                 : RecordContext::ALL;
  }
  c10::CachingDeviceAllocator::CreateContextFn fn = nullptr;
  if (context) {
    torch::installCapturedTracebackPython();
    fn = stacks == "all" ? &gather_all : &gather_python;
  }
  auto& alloc = ore::device_allocator();
  if (clear_history) alloc.record_history(false, nullptr, 0, RecordContext::NEVER);
  // "state" keeps no history of alloc/free calls, only the stacks of live blocks.
  const std::size_t entries = enabled && *enabled == "all" ? max_entries : 0;
  alloc.record_history(enabled.has_value(), fn, entries, when);
}

// The names torch.cuda.memory._snapshot() gives TraceEntry::Action's values, in the enum's order.
constexpr std::array<const char*, 9> kActionNames = {"alloc",         "free_requested", "free_completed",
                                                     "segment_alloc", "segment_free",   "segment_map",
                                                     "segment_unmap", "snapshot",       "oom"};
static_assert(TraceEntry::ALLOC == 0 && TraceEntry::OOM == kActionNames.size() - 1, "one name per action");

const char* action_name(TraceEntry::Action a) {
  const auto i = static_cast<std::size_t>(a);
  return i < kActionNames.size() ? kActionNames[i] : "unknown";
}

// torch.cuda.memory._snapshot()'s dictionary: {"segments": [...], "device_traces": [[...], ...]}.
py::dict memory_snapshot() {
  std::vector<ore::DeviceSnapshot> snaps;
  {
    py::gil_scoped_release no_gil;  // the allocator's locks never wait on the GIL; let others run
    snaps = ore::device_allocator().snapshot();
  }
  // Symbolize every stack in one batch (what torch does for CUDA's snapshot).
  std::vector<torch::CapturedTraceback*> to_symbolize;
  std::unordered_map<const c10::GatheredContext*, std::size_t> index;
  auto want = [&](const std::shared_ptr<c10::GatheredContext>& ctx) {
    auto* tb = dynamic_cast<torch::CapturedTraceback*>(ctx.get());
    if (tb != nullptr && index.emplace(ctx.get(), to_symbolize.size()).second) to_symbolize.push_back(tb);
  };
  for (const auto& d : snaps) {
    for (const auto& seg : d.segments) {
      for (const auto& b : seg.blocks) want(b.context_when_allocated);
    }
    for (const auto& e : d.trace) want(e.context_);
  }
  std::vector<py::object> symbolized = torch::py_symbolize(to_symbolize);
  auto frames_of = [&](const std::shared_ptr<c10::GatheredContext>& ctx) -> py::object {
    auto it = ctx ? index.find(ctx.get()) : index.end();
    return it == index.end() ? py::object(py::list()) : symbolized[it->second];
  };

  py::list segments;
  py::list traces;
  for (std::size_t device = 0; device < snaps.size(); ++device) {
    const auto& d = snaps[device];
    for (const auto& seg : d.segments) {
      py::dict s;
      s["device"] = static_cast<int>(seg.device);
      s["address"] = seg.address;
      s["total_size"] = seg.total_size;
      s["allocated_size"] = seg.allocated_size;
      s["active_size"] = seg.active_size;
      s["requested_size"] = seg.requested_size;
      s["stream"] = reinterpret_cast<std::uintptr_t>(seg.stream);
      s["segment_type"] = seg.is_large ? "large" : "small";
      s["segment_pool_id"] = py::make_tuple(seg.owner_private_pool_id.first, seg.owner_private_pool_id.second);
      s["is_expandable"] = false;
      s["frames"] = py::list();
      py::list blocks;
      std::size_t address = seg.address;
      for (const auto& b : seg.blocks) {
        py::dict block;
        block["address"] = address;
        block["size"] = b.size;
        block["requested_size"] = b.requested_size;
        block["state"] = b.allocated ? "active_allocated" : (b.active ? "active_awaiting_free" : "inactive");
        block["frames"] = b.allocated ? frames_of(b.context_when_allocated) : py::list();
        blocks.append(block);
        address += b.size;
      }
      s["blocks"] = blocks;
      segments.append(s);
    }
    py::list trace;
    for (const auto& e : d.trace) {
      py::dict entry;
      entry["action"] = action_name(e.action_);
      if (e.action_ == TraceEntry::OOM) {
        entry["device_free"] = e.addr_;
      } else {
        entry["addr"] = e.addr_;
      }
      entry["size"] = e.size_;
      entry["stream"] = reinterpret_cast<std::uintptr_t>(e.stream_);
      entry["time_us"] = static_cast<std::int64_t>(e.time_.t_);
      entry["frames"] = frames_of(e.context_);
      entry["pool_id"] = py::make_tuple(0, 0);
      entry["compile_context"] = "N/A";
      entry["user_metadata"] = "";
      trace.append(entry);
    }
    traces.append(trace);
  }
  py::dict out;
  out["segments"] = segments;
  out["device_traces"] = traces;
  py::dict settings;
  settings["PYTORCH_OPENREG_ALLOC_CONF"] = "";
  settings["max_split_size"] = -1;
  settings["garbage_collection_threshold"] = 0;
  settings["expandable_segments"] = false;
  out["allocator_settings"] = settings;
  return out;
}

// caching_allocator_alloc's blocks, kept by address until caching_allocator_delete.
struct RawAllocations {
  std::mutex mutex;
  std::unordered_map<std::uintptr_t, c10::DataPtr> live;
};
RawAllocations& raw_allocations() {
  static auto* r = new RawAllocations();  // leaked: blocks may outlive interpreter teardown
  return *r;
}

}  // namespace

void bind_memory(py::module_& m) {
  m.def("_set_memory_fraction", torch::wrap_pybind_function([](double fraction, std::int64_t device) {
          ore::device_allocator().set_memory_fraction(fraction, to_index(device));
        }));
  m.def("_host_destination_cached_bytes", &at::openreg::host_destination_cached_bytes);
  m.def("_record_memory_history", torch::wrap_pybind_function(&record_memory_history));
  m.def("_memory_snapshot", torch::wrap_pybind_function(&memory_snapshot));
  // (device, stream id) as torch.Stream carries them; the GIL is released: an OOM may wait for devices.
  m.def("_caching_allocator_alloc", torch::wrap_pybind_function_no_gil([](std::size_t size, std::int64_t device,
                                                                           std::int64_t stream_id) {
          const c10::Stream stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, to_index(device)),
                                   stream_id);
          c10::DataPtr ptr = ore::device_allocator().allocate_on(stream, size);
          const auto address = reinterpret_cast<std::uintptr_t>(ptr.get());
          if (address != 0) {
            RawAllocations& raw = raw_allocations();
            std::lock_guard<std::mutex> lock(raw.mutex);
            raw.live.emplace(address, std::move(ptr));
          }
          return address;
        }));
  m.def("_caching_allocator_delete", torch::wrap_pybind_function_no_gil([](std::uintptr_t address) {
          c10::DataPtr ptr;
          {
            RawAllocations& raw = raw_allocations();
            std::lock_guard<std::mutex> lock(raw.mutex);
            auto it = raw.live.find(address);
            // As CUDA's raw_delete: a pointer it did not hand out is an error (RuntimeError).
            TORCH_CHECK(it != raw.live.end() || address == 0, "invalid device pointer: ", address);
            if (it == raw.live.end()) return;
            ptr = std::move(it->second);
            raw.live.erase(it);
          }
          // ptr frees its block here, outside the map's lock
        }));
}
