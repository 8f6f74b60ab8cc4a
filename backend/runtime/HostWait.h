#pragma once
// Interruptible host waits, part of the runtime boundary (Note [Interruptible host waits] in
// sim/src/host_wait.cpp): the layer above installs the check a sleeping synchronize() runs.

#include "backend/Export.h"

namespace c10::openreg {

//! Run about every 20 ms by a host thread sleeping in a synchronize of openreg work (device, stream,
//! event, and the host waits of .item() and copies to the host). Returning goes on waiting; throwing
//! abandons the wait, which then throws that exception unchanged; the queued work still runs.
using HostWaitCheck = void (*)();

//! Installs `check` (nullptr: none). Thread-safe.
OPENREG_BACKEND_API void set_host_wait_check(HostWaitCheck check) noexcept;

//! Called on a host thread as it starts sleeping in such a wait, or in a launch held by a full launch
//! queue, where it holds no lock of openreg's: returns a token for the matching HostReacquire, called
//! on the same thread once the wait has ended (Note [Host waits hold no GIL] in sim/src/host_wait.cpp).
using HostRelease = void* (*)();
using HostReacquire = void (*)(void* token);

//! Installs the pair (either may be nullptr: none). Once, at load time; not concurrent with waits.
OPENREG_BACKEND_API void set_host_sleep_hooks(HostRelease release, HostReacquire reacquire) noexcept;

}  // namespace c10::openreg
