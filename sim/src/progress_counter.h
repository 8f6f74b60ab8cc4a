#pragma once
// ProgressCounter: a monotonic counter that threads can wait on ("until value >= target").
// It knows nothing of streams or events; both use it for their completion counts.
//
// Waiting spins briefly (the common case of a wait that is about to be satisfied), then blocks in
// std::atomic::wait (a futex). The advancing side issues a notify only when a waiter has registered,
// so the hot path (every completed work item) makes no syscall when nobody waits.

#include <atomic>
#include <cstdint>

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
    // seq_cst store, then seq_cst load of waiters_: paired with the waiter's seq_cst increment of
    // waiters_ followed by its seq_cst load of value_ (Dekker). In the single total order either our
    // load sees the waiter (we notify) or the waiter's load sees the new value (it does not block).
    value_.store(v, std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_seq_cst) != 0) value_.notify_all();
  }

  //! Blocks until value >= target.
  void wait_at_least(std::uint64_t target) const noexcept {
    for (int i = 0; i < kSpins; ++i) {
      if (load() >= target) return;
      cpu_relax();
    }
    waiters_.fetch_add(1, std::memory_order_seq_cst);  // see advance_to
    for (;;) {
      std::uint64_t v = value_.load(std::memory_order_seq_cst);
      if (v >= target) break;
      value_.wait(v, std::memory_order_acquire);  // returns when value_ != v (or spuriously)
    }
    // relaxed: the count only decides whether advancers bother to notify; a stale non-zero costs one
    // useless notify, never a missed one.
    waiters_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  // Short: with two cores a spinning waiter steals the core the work it waits for would run on.
  static constexpr int kSpins = 64;
  mutable std::atomic<std::uint64_t> value_{0};
  mutable std::atomic<std::uint32_t> waiters_{0};
};

}  // namespace openreg::sim
