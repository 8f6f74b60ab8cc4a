// Note [Interruptible host waits]
// A host thread that synchronizes sleeps until the device has run the work it waits for, which on a
// simulator running CPU kernels can take seconds. CUDA's synchronize ignores Ctrl-C until the device
// is done; we do better: while it sleeps in one of the synchronize() entry points, a host thread wakes
// every kHostWaitCheckInterval and runs the check its client installed (the Python module installs one
// that runs Python's pending signal handlers on the main thread, so Ctrl-C raises KeyboardInterrupt).
// A check that throws abandons the wait (ProgressCounter leaves its waiter list first) and the
// exception leaves synchronize(); nothing is cancelled, so the queued work still runs and a later
// synchronize waits for it.
// The synchronize() entry points and a producer held by the launch-queue bound open an
// InterruptibleHostWait. The producer has taken its ticket, so an abandoned wait still pushes an item
// in that place, a no-op instead of its own (Note [Bounded launch queue]): the op that issued it raises,
// and the stream's counts stay whole. The other waits stay uninterruptible because they cannot throw:
// device teardown, stream destruction and the drain at exit run where no exception may leave.
// The scope is a thread-local flag rather than a parameter so that the sim's public headers (and with
// them every backend translation unit) do not change for it; it nests (each scope restores the flag).

// Note [Host waits hold no GIL]
// A host thread that sleeps until the device has done some work must not hold anything that work
// needs. A collective's end is completed by its group's communication thread, which takes Python's GIL
// to hand the collective to gloo and to complete it (Note [Stream-ordered collectives] in
// python/torch_openreg/_distributed/_comm_queue.py). torch's generated bindings release the GIL around
// an op, but ops issued from Python-level dispatch (a __torch_dispatch__ subclass such as FSDP2's
// DTensor parameters, calling an OpOverload) keep it: an optimizer's foreach op that filled the launch
// queue behind a pending collective slept holding the GIL, and the communication thread that would
// have drained the queue waited for the GIL forever. So an interruptible wait, where the sim's client
// holds no lock of its own (the synchronize() entry points; a producer held by the launch-queue bound,
// which holds only its unpushed item), gives up what the client's HostSleepHooks release while it
// sleeps: the Python module releases the GIL if the thread holds it. The hooks run outside the
// counter's mutex (HostLocksReleased is made before the lock and ends after it), so the thread that
// wakes and waits for the GIL holds nothing the device side needs. Waits that are not interruptible
// (teardown, destructors) keep the GIL: they run where Python must not continue meanwhile.

// Note [Host threads asleep]
// How many host threads sleep waiting for device work: kernels' thread teams were once sized by it (a
// kernel took the sleeping host's core); they no longer are, since whether the host sleeps when a kernel
// starts is the machine's timing (Note [A kernel's team is decided at issue] in
// backend/engine/ExecuteThreads.cpp). It stays a momentary figure for tools and tests. Every host
// wait for device work ends in ProgressCounter's sleeping branch (the synchronize() entry points, event
// waits, and the launch queue's bound), which counts the thread here for as long as it sleeps. The
// brief spin before it is not counted: a thread that spins still holds its core. Compute threads never
// sleep there (device-side waits are stream-ordered, not blocking), so the count is of host threads.
// relaxed: the count orders no memory; a reader takes a momentary value.

#include "host_wait.h"

#include <atomic>

namespace openreg::sim {
namespace {
// relaxed: the check is a plain function pointer installed once by a client at load time; a wait that
// starts before the store sees either value, both of which are valid.
std::atomic<HostWaitCheck> g_check{nullptr};
thread_local bool tl_interruptible = false;
std::atomic<int> g_asleep{0};
// acquire/release: the hooks' pointer is published once at load; its pointee is static and immutable.
std::atomic<const HostSleepHooks*> g_sleep_hooks{nullptr};
}  // namespace

void set_host_sleep_hooks(const HostSleepHooks* hooks) noexcept { g_sleep_hooks.store(hooks, std::memory_order_release); }

HostLocksReleased::HostLocksReleased() noexcept {
  if (!tl_interruptible) return;
  hooks_ = g_sleep_hooks.load(std::memory_order_acquire);
  if (hooks_ != nullptr && hooks_->release != nullptr) token_ = hooks_->release();
}

HostLocksReleased::~HostLocksReleased() {
  if (hooks_ != nullptr && hooks_->reacquire != nullptr) hooks_->reacquire(token_);
}

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
