// Bindings of the stream race checker (backend/sanitizer/Sanitizer.h, Note [Stream race checker model]
// in backend/sanitizer/RaceChecker.h); torch.openreg.sanitizer wraps them.

#include "backend/sanitizer/Sanitizer.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

void bind_sanitizer(pybind11::module_& m) {
  // mode: 1 raises at the racing op, 2 records every race and reports at exit. False when the process
  // already runs in another mode (modes are fixed once, like OPENREG_SANITIZER).
  m.def("_sanitizer_enable", torch::wrap_pybind_function([](int mode) { return ::openreg::sanitizer::enable(mode); }));
  m.def("_sanitizer_mode", [] { return ::openreg::sanitizer::mode(); });
}
