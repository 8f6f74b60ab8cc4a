#pragma once
// Task: a move-only, type-erased `void()` callable with inline storage, so enqueueing a small lambda
// does not allocate. Larger callables are boxed on the heap.

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

#include "openreg/sim/export.h"

namespace openreg::sim {

//! Move-only callable. Not thread-safe: one owner at a time (the stream queue hands it over).
class OPENREG_SIM_API Task {
 public:
  //! Inline capacity; callables up to this size (and alignment) are stored without allocating.
  static constexpr std::size_t kInlineBytes = 64;

  Task() noexcept = default;
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Task>>>
  Task(F&& f) {  // NOLINT(google-explicit-constructor): lambdas convert implicitly, like std::function
    using Fn = std::decay_t<F>;
    if constexpr (sizeof(Fn) <= kInlineBytes && alignof(Fn) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<Fn>) {
      ::new (static_cast<void*>(storage_)) Fn(std::forward<F>(f));
      ops_ = &inline_ops<Fn>;
    } else {
      *reinterpret_cast<Fn**>(storage_) = new Fn(std::forward<F>(f));
      ops_ = &boxed_ops<Fn>;
    }
  }
  Task(Task&& other) noexcept { move_from(other); }
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      reset();
      move_from(other);
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  //! True when a callable is held.
  explicit operator bool() const noexcept { return ops_ != nullptr; }
  //! Calls the held callable; exceptions propagate to the caller.
  void operator()() { ops_->call(storage_); }
  //! Destroys the held callable (and what it captured) now.
  void reset() noexcept {
    if (ops_ != nullptr) {
      ops_->destroy(storage_);
      ops_ = nullptr;
    }
  }

 private:
  struct Ops {
    void (*call)(void*);
    void (*move)(void* dst, void* src) noexcept;  // move-construct into dst, destroy src
    void (*destroy)(void*) noexcept;
  };
  template <typename Fn>
  static constexpr Ops inline_ops{
      [](void* s) { (*static_cast<Fn*>(s))(); },
      [](void* d, void* s) noexcept {
        ::new (d) Fn(std::move(*static_cast<Fn*>(s)));
        static_cast<Fn*>(s)->~Fn();
      },
      [](void* s) noexcept { static_cast<Fn*>(s)->~Fn(); }};
  template <typename Fn>
  static constexpr Ops boxed_ops{
      [](void* s) { (**static_cast<Fn**>(s))(); },
      [](void* d, void* s) noexcept { *static_cast<Fn**>(d) = *static_cast<Fn**>(s); },
      [](void* s) noexcept { delete *static_cast<Fn**>(s); }};

  void move_from(Task& other) noexcept {
    if (other.ops_ != nullptr) {
      other.ops_->move(storage_, other.storage_);
      ops_ = std::exchange(other.ops_, nullptr);
    }
  }

  alignas(std::max_align_t) unsigned char storage_[kInlineBytes];
  const Ops* ops_ = nullptr;
};

}  // namespace openreg::sim
