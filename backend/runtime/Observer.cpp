#include "backend/runtime/Observer.h"

namespace c10::openreg {

namespace detail {
std::atomic<RuntimeObserver*> g_runtime_observer{nullptr};
}  // namespace detail

namespace {
// Set by a static initializer, read when the runtime starts (after every static initializer ran);
// acquire/release anyway, since a C++ test may start the runtime from any thread.
std::atomic<RuntimeStartHook> g_start_hook{nullptr};
}  // namespace

void set_runtime_observer(RuntimeObserver* observer) noexcept {
  detail::g_runtime_observer.store(observer, std::memory_order_release);
}

void set_runtime_start_hook(RuntimeStartHook hook) noexcept {
  g_start_hook.store(hook, std::memory_order_release);
}

void run_runtime_start_hook(RaceCheck mode) {
  if (RuntimeStartHook hook = g_start_hook.load(std::memory_order_acquire)) hook(mode);
}

}  // namespace c10::openreg
