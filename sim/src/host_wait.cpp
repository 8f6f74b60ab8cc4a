// Note [Interruptible host waits]
// A host thread that synchronizes sleeps until the device has run the work it waits for, which on a
// simulator running CPU kernels can take seconds. CUDA's synchronize ignores Ctrl-C until the device
// is done; we do better: while it sleeps in one of the synchronize() entry points, a host thread wakes
// every kHostWaitCheckInterval and runs the check its client installed (the Python module installs one
// that runs Python's pending signal handlers on the main thread, so Ctrl-C raises KeyboardInterrupt).
// A check that throws abandons the wait (ProgressCounter leaves its waiter list first) and the
// exception leaves synchronize(); nothing is cancelled, so the queued work still runs and a later
// synchronize waits for it.
// Only the synchronize() entry points open an InterruptibleHostWait. The other waits stay
// uninterruptible because abandoning them would break an invariant or cannot throw: a producer held by
// the launch-queue bound has taken its ticket (Note [Bounded launch queue]: its item must be pushed),
// and device teardown, stream destruction and the drain at exit run where no exception may leave.
// The scope is a thread-local flag rather than a parameter so that the sim's public headers (and with
// them every backend translation unit) do not change for it; it nests (each scope restores the flag).

// Note [Host threads asleep]
// A program's host thread issues work while the device runs it, so on a machine of N cores the device
// kernels should leave the host one core while it issues, and may take all N while it sleeps waiting
// for them (Note [The issuing host keeps a core] in backend/ops/engine/ExecuteThreads.cpp). Every host
// wait for device work ends in ProgressCounter's sleeping branch (the synchronize() entry points, event
// waits, and the launch queue's bound), which counts the thread here for as long as it sleeps. The
// brief spin before it is not counted: a thread that spins still holds its core. Compute threads never
// sleep there (device-side waits are stream-ordered, not blocking), so the count is of host threads.
// relaxed: the count orders no memory; a reader sizing a kernel's team takes a momentary value, and a
// stale one costs one kernel a thread more or less.

#include "host_wait.h"

#include <atomic>

namespace openreg::sim {
namespace {
// relaxed: the check is a plain function pointer installed once by a client at load time; a wait that
// starts before the store sees either value, both of which are valid.
std::atomic<HostWaitCheck> g_check{nullptr};
thread_local bool tl_interruptible = false;
std::atomic<int> g_asleep{0};
}  // namespace

void set_host_wait_check(HostWaitCheck check) noexcept { g_check.store(check, std::memory_order_relaxed); }

InterruptibleHostWait::InterruptibleHostWait() noexcept : previous_(tl_interruptible) { tl_interruptible = true; }
InterruptibleHostWait::~InterruptibleHostWait() { tl_interruptible = previous_; }

HostAsleep::HostAsleep() noexcept { g_asleep.fetch_add(1, std::memory_order_relaxed); }
HostAsleep::~HostAsleep() { g_asleep.fetch_sub(1, std::memory_order_relaxed); }

int host_threads_asleep() noexcept { return g_asleep.load(std::memory_order_relaxed); }

HostWaitCheck host_wait_check_here() noexcept {
  return tl_interruptible ? g_check.load(std::memory_order_relaxed) : nullptr;
}

}  // namespace openreg::sim
