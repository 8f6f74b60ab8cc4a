#pragma once
// Letting the autograd engine's openreg device threads settle before the interpreter finalizes
// (Note [Autograd device threads at exit] in backend/AutogradExit.cpp).

#include "backend/Export.h"

namespace c10::openreg {

//! Returns once every autograd device thread that serves a started openreg device has finished the
//! backward passes it ran (and dropped what they held). For the Python package's exit hook: call it
//! with the GIL released, before the interpreter finalizes. Does nothing if no autograd device thread
//! was started; reports nothing.
OPENREG_BACKEND_API void settle_autograd_device_threads() noexcept;

}  // namespace c10::openreg
