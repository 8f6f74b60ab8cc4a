// Bindings of the stream race checker (Note [Sanitizer hooks] in backend/sanitizer/Sanitizer.h): turning
// it on from Python, the Python stack of each op (gathered only while the checker is on), and the
// Python type of a race, torch.openreg.sanitizer.StreamRaceError (a RuntimeError subclass).

#include "backend/sanitizer/RaceChecker.h"
#include "backend/sanitizer/Sanitizer.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace san = ::openreg::sanitizer;

// Created once at import and never released (races may be raised during interpreter teardown).
PyObject* g_race_error = nullptr;

constexpr std::size_t kMaxFrames = 16;  // innermost frames shown per access

//! The Python stack an op was issued from: frames are kept as code objects and offsets (cheap to
//! gather, torch's memory snapshots do the same) and turned into text only when a race is reported.
struct PythonStack final : san::IssueContext {
  std::shared_ptr<torch::CapturedTraceback> traceback;

  std::string describe() const override {
    pybind11::gil_scoped_acquire gil;  // symbolizing reads the code objects
    torch::SymbolizedTracebacks s = torch::symbolize({traceback.get()});
    if (s.tracebacks.empty() || s.tracebacks[0].empty()) return "    (no Python frames)\n";
    const auto& frames = s.tracebacks[0];  // innermost first
    std::ostringstream os;
    const std::size_t n = std::min(frames.size(), kMaxFrames);
    for (std::size_t i = n; i-- > 0;) {  // printed outermost first, as Python prints a traceback
      const auto& f = s.all_frames[frames[i]];
      os << "    File \"" << f.filename << "\", line " << f.lineno << ", in " << f.funcname << "\n";
    }
    return os.str();
  }
};

std::shared_ptr<const san::IssueContext> gather_python_stack() {
  auto tb = torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, /*cpp=*/false);
  if (!tb) return nullptr;
  auto ctx = std::make_shared<PythonStack>();
  ctx->traceback = std::move(tb);
  return ctx;
}

[[noreturn]] void raise_race(const std::string& message) {
  if (!Py_IsInitialized() || g_race_error == nullptr) TORCH_CHECK(false, message);
  pybind11::gil_scoped_acquire gil;
  PyErr_SetString(g_race_error, message.c_str());
  // torch's bindings re-raise a python_error as the Python exception it holds; persist() moves it
  // out of this thread's error indicator, so it survives the GIL being released while unwinding.
  python_error e;
  e.persist();
  throw e;
}

}  // namespace

void bind_sanitizer(pybind11::module_& m) {
  g_race_error = PyErr_NewException("torch.openreg.sanitizer.StreamRaceError", PyExc_RuntimeError, nullptr);
  m.attr("_StreamRaceError") = pybind11::handle(g_race_error);
  san::set_context_gatherer(&gather_python_stack);
  san::set_race_raiser(&raise_race);
  m.def("_sanitizer_enable", torch::wrap_pybind_function([](bool report) {
          return san::enable(report ? san::Mode::kReport : san::Mode::kRaise);
        }));
  m.def("_sanitizer_mode", [] { return static_cast<int>(san::mode()); });
  m.def("_sanitizer_races", [] { return san::race_messages(); });
}
