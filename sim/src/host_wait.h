#pragma once
// Which host waits are interruptible (Note [Interruptible host waits] in host_wait.cpp).

#include "openreg/sim/host_wait.h"

namespace openreg::sim {

//! While alive, the calling thread's sleeping waits run the installed HostWaitCheck (and so may throw).
//! Opened by the synchronize() entry points and the launch-queue bound; teardown and destructors wait
//! uninterruptibly.
class InterruptibleHostWait {
 public:
  InterruptibleHostWait() noexcept;
  ~InterruptibleHostWait();
  InterruptibleHostWait(const InterruptibleHostWait&) = delete;
  InterruptibleHostWait& operator=(const InterruptibleHostWait&) = delete;

 private:
  bool previous_;
};

//! While alive, the calling thread has given up what the installed HostSleepHooks release, if it is
//! inside an InterruptibleHostWait (Note [Host waits hold no GIL]); otherwise it does nothing.
class HostLocksReleased {
 public:
  HostLocksReleased() noexcept;
  ~HostLocksReleased();
  HostLocksReleased(const HostLocksReleased&) = delete;
  HostLocksReleased& operator=(const HostLocksReleased&) = delete;

 private:
  const HostSleepHooks* hooks_ = nullptr;
  void* token_ = nullptr;
};

//! Counts the calling thread as asleep in a wait for device work while alive (host_threads_asleep()).
class HostAsleep {
 public:
  HostAsleep() noexcept;
  ~HostAsleep();
  HostAsleep(const HostAsleep&) = delete;
  HostAsleep& operator=(const HostAsleep&) = delete;
};

//! The check a sleeping wait on this thread runs now: the installed one inside an
//! InterruptibleHostWait, else nullptr.
HostWaitCheck host_wait_check_here() noexcept;

}  // namespace openreg::sim
