#pragma once
// Host waits that a program can interrupt (Note [Interruptible host waits] in sim/src/host_wait.cpp).

#include <chrono>

#include "openreg/sim/export.h"

namespace openreg::sim {

//! Run by a host thread about every kHostWaitCheckInterval while it sleeps in Stream::synchronize,
//! Event::synchronize, Device::synchronize, Runtime::synchronize or an enqueue held by a full launch
//! queue (Note [Bounded launch queue] in sim/src/stream.cpp). It returns to go on waiting, or
//! throws to abandon the wait: that synchronize() then throws the exception unchanged, and the work it
//! waited for still runs (a later synchronize waits for it). It must not wait for device work itself.
using HostWaitCheck = void (*)();

//! How often a sleeping host wait runs the installed check.
inline constexpr std::chrono::milliseconds kHostWaitCheckInterval{20};

//! Installs `check` for every interruptible host wait that starts sleeping from now on (nullptr: none,
//! the default). Thread-safe.
OPENREG_SIM_API void set_host_wait_check(HostWaitCheck check) noexcept;

//! What a host thread gives up while it sleeps in an interruptible host wait, where it holds no lock of
//! the sim's client (the synchronize() entry points, a producer held by a full launch queue): the
//! Python module releases the GIL there, so the threads that complete device work (a collective's
//! communication thread) never wait for a host thread that waits for them (Note [Host waits hold no
//! GIL] in sim/src/host_wait.cpp). `release` returns a token that `reacquire` gets back; both run on
//! the sleeping thread, `reacquire` after the wait ended (also when the check threw).
struct HostSleepHooks {
  void* (*release)() = nullptr;
  void (*reacquire)(void* token) = nullptr;
};

//! Installs `hooks` (static storage; nullptr: none, the default) for every interruptible host wait that
//! starts sleeping from now on. Thread-safe.
OPENREG_SIM_API void set_host_sleep_hooks(const HostSleepHooks* hooks) noexcept;

//! How many host threads sleep right now in a wait for device work (a synchronize(), an event's wait, a
//! producer held by a full launch queue): a momentary count for tools and tests, not for
//! synchronization (Note [Host threads asleep] in sim/src/host_wait.cpp).
OPENREG_SIM_API int host_threads_asleep() noexcept;

}  // namespace openreg::sim
