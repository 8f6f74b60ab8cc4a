#include "backend/runtime/HostWait.h"

#include <openreg/sim/host_wait.h>

namespace c10::openreg {

void set_host_wait_check(HostWaitCheck check) noexcept { ::openreg::sim::set_host_wait_check(check); }

}  // namespace c10::openreg
