#pragma once

#include "backend/Export.h"

// Note [Sync debug mode]
// torch.openreg.set_sync_debug_mode, like torch.cuda's: with "warn" (1) every operation that makes the
// host wait for a device raises a UserWarning, with "error" (2) a RuntimeError, with "default" (0)
// nothing. The sync points flagged are torch.cuda's: blocking copies between host and device (which
// includes .item(), .cpu(), .tolist() and copies from pageable memory), Stream.synchronize, and ops whose
// result the host needs before it can return (nonzero, data-dependent shapes: the fallback's sync
// path). Like CUDA, device synchronize (torch.openreg.synchronize) and Event.synchronize are not
// flagged: they are the explicit way to wait.
//
// Every sync point calls warn_or_error_on_sync() just before it waits, on the calling thread, so the
// warning or error lands in the caller's Python frame.

namespace c10::openreg {

enum class SyncDebugMode : int { kDisabled = 0, kWarn = 1, kError = 2 };

//! Sets the process-wide mode (any thread; a bad value is a user error).
OPENREG_BACKEND_API void set_sync_debug_mode(int mode);
OPENREG_BACKEND_API SyncDebugMode get_sync_debug_mode();

//! Warns or raises per the mode; called by each sync point before the host waits.
void warn_or_error_on_sync();

}  // namespace c10::openreg
