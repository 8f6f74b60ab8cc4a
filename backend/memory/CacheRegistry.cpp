#include "backend/memory/CacheRegistry.h"

#include <mutex>
#include <vector>

namespace c10::openreg {

namespace {

struct Registry {
  std::mutex mutex;  // guards `caches`; never held while a cache releases (a release may take its own locks)
  std::vector<ReleasableCache> caches;
};

Registry& registry() {
  // Constructed on first use (caches register from other files' static initializers, in any order);
  // leaked, since empty_cache may run during static destruction.
  static auto* r = new Registry();
  return *r;
}

}  // namespace

void register_releasable_cache(ReleasableCache cache) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.caches.push_back(cache);
}

void release_every_cache() {
  Registry& r = registry();
  std::vector<ReleasableCache> caches;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    caches = r.caches;
  }
  for (const ReleasableCache& cache : caches) cache.release();
}

}  // namespace c10::openreg
