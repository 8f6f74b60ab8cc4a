#pragma once
// The end of a process that used openreg: letting the autograd engine's openreg device threads settle
// before the interpreter finalizes (Note [Autograd device threads at exit] in backend/runtime/Exit.cpp),
// and waiting for the work still queued (Note [Teardown at exit] in sim/src/runtime.cpp).

#include "backend/Export.h"

namespace c10::openreg {

//! Returns once every autograd device thread that serves a started openreg device has finished the
//! backward passes it ran (and dropped what they held). For the Python package's exit hook: call it
//! with the GIL released, before the interpreter finalizes. Does nothing if no autograd device thread
//! was started; reports nothing.
OPENREG_BACKEND_API void settle_autograd_device_threads() noexcept;

//! Waits for all work queued on every device, reporting nothing; what the process runs at exit, and
//! what the Python package runs before the interpreter finalizes. Does nothing before the runtime
//! started, in a forked child or on a device thread.
OPENREG_BACKEND_API void drain_at_exit() noexcept;

}  // namespace c10::openreg
