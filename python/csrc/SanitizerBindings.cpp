// Bindings of the stream race checker (backend/sanitizer/Sanitizer.h, Note [Stream race checker model]
// in backend/sanitizer/RaceChecker.h); torch.openreg.sanitizer wraps them.

#include "backend/runtime/CollectiveEvent.h"
#include "backend/sanitizer/Sanitizer.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace san = ::openreg::sanitizer;

namespace {
// Whether the calling thread is running Python: it has a thread state with a current frame. Read
// without the GIL: a thread's frame stack is changed only by that thread, which is here, in C++.
bool thread_runs_python() {
  PyThreadState* ts = PyGILState_GetThisThreadState();
  if (ts == nullptr) return false;
#if PY_VERSION_HEX >= 0x030D0000
  return ts->current_frame != nullptr;
#else
  return ts->cframe != nullptr && ts->cframe->current_frame != nullptr;
#endif
}

// Note [Host access to pinned memory] in backend/sanitizer/Sanitizer.cpp: pushes or pops this thread's
// torch.openreg.sanitizer._HostAccessMode. Called without the GIL, on a thread that runs Python.
bool watch_host_access(bool watch) {
  pybind11::gil_scoped_acquire gil;
  try {
    return pybind11::module_::import("torch_openreg.openreg.sanitizer").attr("_watch_host_access")(watch).cast<bool>();
  } catch (pybind11::error_already_set& e) {
    e.discard_as_unraisable("torch_openreg.openreg.sanitizer._watch_host_access");
    return false;
  }
}
}  // namespace

void bind_sanitizer(pybind11::module_& m) {
  san::set_python_frames_probe(&thread_runs_python);
  san::set_host_access_watcher(&watch_host_access);
  // mode: 1 raises at the racing op, 2 records every race and reports at exit. False when the process
  // already runs in another mode (modes are fixed once, like OPENREG_SANITIZER).
  m.def("_sanitizer_enable", torch::wrap_pybind_function([](int mode) {
          TORCH_CHECK_VALUE(mode == 1 || mode == 2, "sanitizer mode must be 1 (raise) or 2 (report), got ", mode);
          return san::enable(static_cast<san::Mode>(mode));
        }));
  m.def("_sanitizer_mode", [] { return static_cast<int>(san::mode()); });
  // The messages of the races found so far (report mode: all of them).
  m.def("_sanitizer_races", [] { return san::race_messages(); });
  // A compiled kernel's buffers, reported by Inductor's generated wrapper before it enqueues the kernel
  // on the current stream (python/torch_openreg/_inductor). Raises the race (raise mode) before the
  // kernel is queued, as an eager op does.
  m.def("_sanitizer_launch", torch::wrap_pybind_function([](const std::string& name, const std::vector<at::Tensor>& reads,
                                                            const std::vector<at::Tensor>& writes) {
          san::on_launch(name, reads, writes);
        }));
  // A CPU op's tensors read and written by the host thread (torch.openreg.sanitizer._HostAccessMode); those
  // in pinned memory are checked. Raises the race (raise mode) before the op runs.
  m.def("_sanitizer_host_access",
        torch::wrap_pybind_function([](const std::string& name, const std::vector<at::Tensor>& reads,
                                       const std::vector<at::Tensor>& writes) {
          san::on_host_access(name, reads, writes);
        }));
  // One collective (python/torch_openreg/_distributed/_group.py): its openreg tensors read and written,
  // on `device`, ending at `end` (the collective's _CollectiveEvent).
  m.def("_sanitizer_collective",
        torch::wrap_pybind_function([](const std::string& name, int device, const c10::openreg::CollectiveEvent& end,
                                       const std::vector<at::Tensor>& reads, const std::vector<at::Tensor>& writes) {
          san::on_collective(name, device, &end, reads, writes);
        }));
}
