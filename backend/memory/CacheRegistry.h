#pragma once
// Note [One registry of releasable caches]
// openreg keeps freed memory in several caches: the device allocator's block caches (BlockCache.h), the
// recycled host blocks of device-to-host results (HostDestinations.h) and the kernels' scratch memory
// (KernelScratch.h). torch.openreg.empty_cache() must release all of them, and nothing else should need
// to know the whole list: each cache registers itself here, from a static initializer of its own file,
// and empty_cache (the device allocator's emptyCache) releases what is registered. A new cache is one
// registration; the device allocator never includes the others.
//
// Each release is independent of the others (none holds memory of another), so their order does not
// matter. Thread-safety: register_releasable_cache may run at any time (in practice during static
// initialization); release_every_cache may run concurrently with anything, and with itself.

#include "backend/Export.h"

#include <cstddef>

namespace c10::openreg {

struct ReleasableCache {
  const char* name;          //!< for messages: "device blocks", "host destinations", ...
  void (*release)();         //!< returns every unused cached byte to where it came from
};

//! Adds `cache` to the registry (kept for the process lifetime).
OPENREG_BACKEND_API void register_releasable_cache(ReleasableCache cache);
//! Releases every registered cache, in registration order.
OPENREG_BACKEND_API void release_every_cache();

}  // namespace c10::openreg
