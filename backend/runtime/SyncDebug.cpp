// See Note [Sync debug mode] in runtime/SyncDebug.h.

#include "backend/runtime/SyncDebug.h"

#include <c10/util/Exception.h>

#include <atomic>

namespace c10::openreg {
namespace {

// Relaxed: the mode is a standalone flag; no other data is published with it, and a sync point that
// races with a mode change may see either value, as with torch.cuda's plain global.
std::atomic<int> sync_debug_mode{static_cast<int>(SyncDebugMode::kDisabled)};

}  // namespace

void set_sync_debug_mode(int mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "invalid value of debug_mode, expected one of 0,1,2");
  sync_debug_mode.store(mode, std::memory_order_relaxed);
}

SyncDebugMode get_sync_debug_mode() {
  return static_cast<SyncDebugMode>(sync_debug_mode.load(std::memory_order_relaxed));
}

void warn_or_error_on_sync() {
  switch (get_sync_debug_mode()) {
    case SyncDebugMode::kDisabled:
      return;
    case SyncDebugMode::kWarn:
      TORCH_WARN("called a synchronizing openreg operation");
      return;
    case SyncDebugMode::kError:
      TORCH_CHECK(false, "called a synchronizing openreg operation");
  }
}

}  // namespace c10::openreg
