#pragma once
// ArenaTaskArg: the one pointer an arena task functor carries. See Note [TSAN and oneTBB]: TBB copies
// a functor into its task object and reads it on a worker through uninstrumented code, so TSAN would
// report the functor's own bytes as racing. Making the pointer an atomic (relaxed: it only needs to
// be a well-defined read; what it points to is published by the hand-off release/acquire) removes the
// report without hiding races in what the task does. Costs nothing: relaxed loads/stores are plain moves.

#include <atomic>

namespace openreg::sim {

template <typename T>
class ArenaTaskArg {
 public:
  explicit ArenaTaskArg(T* p) noexcept { ref().store(p, std::memory_order_relaxed); }
  ArenaTaskArg(const ArenaTaskArg& o) noexcept { ref().store(o.get(), std::memory_order_relaxed); }
  ArenaTaskArg& operator=(const ArenaTaskArg&) = delete;
  T* get() const noexcept { return ref().load(std::memory_order_relaxed); }

 private:
  // A plain pointer accessed only through atomic_ref: std::atomic's constructor would initialize it
  // with a plain (non-atomic) write first.
  std::atomic_ref<T*> ref() const noexcept { return std::atomic_ref<T*>(p_); }
  mutable T* p_;
};

}  // namespace openreg::sim
