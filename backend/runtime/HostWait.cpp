#include "backend/runtime/HostWait.h"

#include <openreg/sim/host_wait.h>

namespace c10::openreg {

void set_host_wait_check(HostWaitCheck check) noexcept { ::openreg::sim::set_host_wait_check(check); }

void set_host_sleep_hooks(HostRelease release, HostReacquire reacquire) noexcept {
  // Static storage: the sim keeps the pointer for every later wait.
  static ::openreg::sim::HostSleepHooks hooks;
  hooks.release = release;
  hooks.reacquire = reacquire;
  ::openreg::sim::set_host_sleep_hooks(&hooks);
}

}  // namespace c10::openreg
