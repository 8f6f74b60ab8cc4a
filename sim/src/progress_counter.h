#pragma once
// ProgressCounter: a monotonic counter that threads can wait on ("until value >= target").
// It knows nothing of streams or events; both use it for their completion counts.
//
// Note [Waking only satisfied waiters]
// Waiting spins briefly (the common case of a wait that is about to be satisfied), then registers its
// target and blocks in std::atomic::wait (a futex). The advancing side issues a notify only when the
// new value reaches the lowest registered target. A host thread in synchronize() waits for the last
// of possibly thousands of queued items: notifying on every completion (as this counter once did)
// cost the device thread a futex wake per item and woke the host to re-check each time, two context
// switches per item that took a core from the work itself (about 2 us per small kernel on a 2-core
// VM). So the hot path (every completed work item) makes no syscall unless that item is the one
// somebody waits for.
//
// Ordering (Dekker, all seq_cst): a waiter publishes its target (wake_at_) and then loads value_; the
// advancer stores value_ and then loads wake_at_. In the single total order either the advancer's
// load sees the target (and notifies if the value reached it) or the waiter's load sees the new value
// (and it does not block). wake_at_ is the minimum of the registered targets: registering lowers it,
// leaving recomputes it from the remaining waiters, so it never exceeds a registered target. A waiter
// woken early (another waiter's target was lower, or a spurious wake) keeps its registration while it
// waits again. Waiters are nodes on their own stacks, linked under mutex_ (the slow path only: a
// waiter that got that far is about to sleep anyway); the advancer never takes the mutex.

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>

#include "cpu_relax.h"

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
    if (wake_at_.load(std::memory_order_seq_cst) <= v) value_.notify_all();
  }

  //! Blocks until value >= target.
  void wait_at_least(std::uint64_t target) const noexcept {
    for (int i = 0; i < kSpins; ++i) {
      if (load() >= target) return;
      cpu_relax();
    }
    Waiter self{target, nullptr};
    enroll(self);
    for (;;) {
      const std::uint64_t v = value_.load(std::memory_order_seq_cst);
      if (v >= target) break;
      value_.wait(v, std::memory_order_acquire);  // returns when value_ != v (or spuriously)
    }
    leave(self);
  }

 private:
  struct Waiter {
    std::uint64_t target;
    Waiter* next;
  };

  void enroll(Waiter& w) const noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    w.next = waiters_;
    waiters_ = &w;
    if (w.target < wake_at_.load(std::memory_order_relaxed)) wake_at_.store(w.target, std::memory_order_seq_cst);
  }

  void leave(Waiter& w) const noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
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
  mutable std::mutex mutex_;                             // guards waiters_
  mutable Waiter* waiters_ = nullptr;
};

}  // namespace openreg::sim
