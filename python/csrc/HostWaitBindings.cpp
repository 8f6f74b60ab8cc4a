// Ctrl-C during a host wait (Note [Interruptible host waits] in sim/src/host_wait.cpp): the check the
// runtime runs while a host thread sleeps in a synchronize or a launch held by a full launch queue, and
// the GIL given up meanwhile. On Python's main thread (the only thread
// whose signal handlers Python runs) it runs the pending handlers; one that raises (KeyboardInterrupt
// for SIGINT) ends the wait with that Python exception, which torch's error handling restores when the
// exception reaches Python (torch.openreg.synchronize, Tensor.item, torch.accelerator.synchronize, ...).

#include "backend/runtime/HostWait.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/python_headers.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

#include <atomic>

namespace {

// Python's main thread, as PyThread_get_thread_ident() names it; written once at import, before the
// check is installed (relaxed: the installation's own publication orders it for the waits that run it).
std::atomic<unsigned long> g_main_thread{0};

bool interpreter_running() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

void run_python_signal_handlers() {
  // Cheap tests first: this runs every 20 ms while the host sleeps, on any thread that waits.
  if (PyThread_get_thread_ident() != g_main_thread.load(std::memory_order_relaxed) || !interpreter_running()) {
    return;
  }
  python_error raised;
  {
    pybind11::gil_scoped_acquire gil;  // the waiting caller released it (or holds it: then a no-op)
    if (PyErr_CheckSignals() == 0) return;
    raised.persist();
  }
  throw raised;
}

// Note [Host waits hold no GIL] in sim/src/host_wait.cpp: a thread that sleeps waiting for the device
// gives the GIL up, so a communication thread that completes a collective can take it meanwhile.
void* release_gil() {
  if (!interpreter_running() || PyGILState_Check() == 0) return nullptr;
  return PyEval_SaveThread();
}

void reacquire_gil(void* token) {
  if (token != nullptr) PyEval_RestoreThread(static_cast<PyThreadState*>(token));
}

}  // namespace

void bind_host_wait(pybind11::module_& m) {
  (void)m;
  const auto main = pybind11::module_::import("threading").attr("main_thread")().attr("ident");
  g_main_thread.store(main.cast<unsigned long>(), std::memory_order_relaxed);
  c10::openreg::set_host_wait_check(&run_python_signal_handlers);
  c10::openreg::set_host_sleep_hooks(&release_gil, &reacquire_gil);
}
