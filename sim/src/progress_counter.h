#pragma once
// ProgressCounter: a monotonic counter that threads can wait on ("until value >= target").
// It knows nothing of streams or events; both use it for their completion counts.
//
// Note [Waking only satisfied waiters]
// Waiting spins briefly (the common case of a wait that is about to be satisfied), then registers its
// target and sleeps on a condition variable. The advancing side notifies only when the new value
// reaches the lowest registered target. A host thread in synchronize() waits for the last of possibly
// thousands of queued items: notifying on every completion (as this counter once did) cost the device
// thread a futex wake per item and woke the host to re-check each time, two context switches per item
// that took a core from the work itself (about 2 us per small kernel on a 2-core VM). So the hot path
// (every completed work item) takes no lock and makes no syscall unless that item is the one somebody
// waits for.
//
// Ordering (Dekker, all seq_cst): a waiter publishes its target (wake_at_) and then loads value_; the
// advancer stores value_ and then loads wake_at_. In the single total order either the advancer's
// load sees the target (and notifies if the value reached it) or the waiter's load sees the new value
// (and it does not sleep). The waiter checks the value and goes to sleep under mutex_, and the advancer
// notifies under mutex_, so a notify cannot fall between the check and the sleep. wake_at_ is the
// minimum of the registered targets: registering lowers it, leaving recomputes it from the remaining
// waiters, so it never exceeds a registered target. A waiter woken early (another waiter's target was
// lower, or a spurious wake) keeps its registration while it sleeps again. Waiters are nodes on their
// own stacks, linked under mutex_.
//
// A sleeping wait inside an InterruptibleHostWait wakes every kHostWaitCheckInterval to run the host
// wait check, which may throw (Note [Interruptible host waits] in host_wait.cpp); it runs with mutex_
// released, since it may block (on the GIL) while the advancer needs mutex_ to notify.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>

#include "cpu_relax.h"
#include "host_wait.h"

namespace openreg::sim {

class ProgressCounter {
 public:
  //! Current value; acquire so that whatever the advancer wrote before advancing is visible.
  std::uint64_t load() const noexcept { return value_.load(std::memory_order_acquire); }

  //! value += 1. Only one thread at a time may advance a given counter (its owner).
  void increment() noexcept { advance_to(value_.load(std::memory_order_relaxed) + 1); }

  //! value = v (v > value). Only one thread at a time may advance a given counter.
  void advance_to(std::uint64_t v) noexcept {
    value_.store(v, std::memory_order_seq_cst);
    if (wake_at_.load(std::memory_order_seq_cst) <= v) {
      std::lock_guard<std::mutex> lock(mutex_);  // a waiter between its check and its sleep holds it
      woken_.notify_all();
    }
  }

  //! Blocks until value >= target. Inside an InterruptibleHostWait the installed host wait check runs
  //! while it sleeps and may throw; the wait is then abandoned (and the counter left as it was).
  void wait_at_least(std::uint64_t target) const {
    for (int i = 0; i < kSpins; ++i) {
      if (load() >= target) return;
      cpu_relax();
    }
    const HostWaitCheck check = host_wait_check_here();
    const HostAsleep asleep;  // Note [Host threads asleep]
    // Before the lock, so it ends after the lock is released (Note [Host waits hold no GIL]).
    const HostLocksReleased released;
    std::unique_lock<std::mutex> lock(mutex_);
    Waiter self{target, nullptr};
    enroll(self);
    auto next_check = std::chrono::steady_clock::now() + kHostWaitCheckInterval;
    while (value_.load(std::memory_order_seq_cst) < target) {
      if (check == nullptr) {
        woken_.wait(lock);
        continue;
      }
      if (woken_.wait_until(lock, next_check) == std::cv_status::no_timeout) continue;
      lock.unlock();
      try {
        check();
      } catch (...) {
        lock.lock();
        leave(self);
        throw;
      }
      lock.lock();
      next_check = std::chrono::steady_clock::now() + kHostWaitCheckInterval;
    }
    leave(self);
  }

 private:
  struct Waiter {
    std::uint64_t target;
    Waiter* next;
  };

  // Both under mutex_.
  void enroll(Waiter& w) const noexcept {
    w.next = waiters_;
    waiters_ = &w;
    if (w.target < wake_at_.load(std::memory_order_relaxed)) wake_at_.store(w.target, std::memory_order_seq_cst);
  }

  void leave(Waiter& w) const noexcept {
    std::uint64_t lowest = kNobody;
    for (Waiter** p = &waiters_; *p != nullptr;) {
      if (*p == &w) {
        *p = w.next;
        continue;
      }
      if ((*p)->target < lowest) lowest = (*p)->target;
      p = &(*p)->next;
    }
    // Raising it is safe: every remaining waiter's target is >= lowest, and a stale lower value only
    // costs the advancer a notify nobody needed.
    wake_at_.store(lowest, std::memory_order_seq_cst);
  }

  // Short: with two cores a spinning waiter steals the core the work it waits for would run on.
  static constexpr int kSpins = 64;
  static constexpr std::uint64_t kNobody = std::numeric_limits<std::uint64_t>::max();

  mutable std::atomic<std::uint64_t> value_{0};
  mutable std::atomic<std::uint64_t> wake_at_{kNobody};  // lowest registered target
  mutable std::mutex mutex_;                             // guards waiters_; orders check-then-sleep vs notify
  mutable std::condition_variable woken_;                // notified when value_ reaches wake_at_
  mutable Waiter* waiters_ = nullptr;
};

}  // namespace openreg::sim
