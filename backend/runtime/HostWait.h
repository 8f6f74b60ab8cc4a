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

}  // namespace c10::openreg
