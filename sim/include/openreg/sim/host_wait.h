#pragma once
// Host waits that a program can interrupt (Note [Interruptible host waits] in sim/src/host_wait.cpp).

#include <chrono>

#include "openreg/sim/export.h"

namespace openreg::sim {

//! Run by a host thread about every kHostWaitCheckInterval while it sleeps in Stream::synchronize,
//! Event::synchronize, Device::synchronize or Runtime::synchronize. It returns to go on waiting, or
//! throws to abandon the wait: that synchronize() then throws the exception unchanged, and the work it
//! waited for still runs (a later synchronize waits for it). It must not wait for device work itself.
using HostWaitCheck = void (*)();

//! How often a sleeping host wait runs the installed check.
inline constexpr std::chrono::milliseconds kHostWaitCheckInterval{20};

//! Installs `check` for every interruptible host wait that starts sleeping from now on (nullptr: none,
//! the default). Thread-safe.
OPENREG_SIM_API void set_host_wait_check(HostWaitCheck check) noexcept;

//! How many host threads sleep right now in a wait for device work (a synchronize(), an event's wait, a
//! producer held by a full launch queue): a momentary count for sizing kernels' thread teams, not for
//! synchronization (Note [Host threads asleep] in sim/src/host_wait.cpp).
OPENREG_SIM_API int host_threads_asleep() noexcept;

}  // namespace openreg::sim
