// Bindings of the sync debug mode (Note [Sync debug mode] in backend/runtime/SyncDebug.h).

#include "backend/runtime/SyncDebug.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

void bind_sync_debug(pybind11::module_& m) {
  m.def("_set_sync_debug_mode",
        torch::wrap_pybind_function([](int mode) { c10::openreg::set_sync_debug_mode(mode); }));
  m.def("_get_sync_debug_mode", [] { return static_cast<int>(c10::openreg::get_sync_debug_mode()); });
}
