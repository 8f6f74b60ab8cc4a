#pragma once

#include "backend/Export.h"

// Fork safety, like CUDA: a child forked after the runtime started has none of the parent's device
// threads, so any device use in it must fail loudly instead of hanging.
//
// Thread-safety: all functions may be called from any thread.

namespace c10::openreg {

//! Records that the runtime has started in this process and installs the fork handler (idempotent).
void mark_runtime_initialized() noexcept;
//! Whether the runtime has started in this process (false in a child forked from a started parent).
OPENREG_BACKEND_API bool is_runtime_initialized() noexcept;
//! True in a child process forked after the parent had started the runtime.
OPENREG_BACKEND_API bool is_in_bad_fork() noexcept;
//! Throws a c10::Error ("Cannot re-initialize openreg in forked subprocess ...") in a bad fork.
void check_not_in_bad_fork();

}  // namespace c10::openreg
