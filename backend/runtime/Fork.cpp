#include "backend/runtime/Fork.h"

#include <c10/util/Exception.h>

#include <pthread.h>

#include <atomic>
#include <mutex>

namespace c10::openreg {
namespace {

// Relaxed is enough for both flags: they are set once (by init, or by the fork handler before the child
// runs any other code) and only read to decide whether to throw; they guard no other data.
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_bad_fork{false};

void on_fork_child() {
  // Runs in the child only: the parent's device threads did not survive the fork.
  if (g_initialized.load(std::memory_order_relaxed)) {
    g_bad_fork.store(true, std::memory_order_relaxed);
    g_initialized.store(false, std::memory_order_relaxed);
  }
}

}  // namespace

void mark_runtime_initialized() noexcept {
  static std::once_flag handler_installed;
  std::call_once(handler_installed, [] { pthread_atfork(nullptr, nullptr, on_fork_child); });
  g_initialized.store(true, std::memory_order_relaxed);
}

bool is_runtime_initialized() noexcept {
  return g_initialized.load(std::memory_order_relaxed);
}

bool is_in_bad_fork() noexcept {
  return g_bad_fork.load(std::memory_order_relaxed);
}

void check_not_in_bad_fork() {
  TORCH_CHECK(!is_in_bad_fork(),
              "Cannot re-initialize openreg in forked subprocess. To use openreg with multiprocessing, "
              "you must use the 'spawn' start method");
}

}  // namespace c10::openreg
