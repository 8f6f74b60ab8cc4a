#include "openreg/sim/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "trace_recorder.h"

namespace openreg::sim {
namespace {

// relaxed: tracing is a diagnostic; a record racing with start/stop may land on either side.
std::atomic<bool> g_enabled{false};

struct ThreadBuffer {
  std::mutex mutex;
  std::vector<TraceRecord> records;  // guarded by mutex
};

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;  // guarded by mutex; buffers outlive threads
};

// Leaked on purpose: worker threads may still record while static destructors run at exit.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

ThreadBuffer& this_thread_buffer() {
  thread_local std::shared_ptr<ThreadBuffer> buffer = [] {
    auto b = std::make_shared<ThreadBuffer>();
    std::lock_guard lock(registry().mutex);
    registry().buffers.push_back(b);
    return b;
  }();
  return *buffer;
}

}  // namespace

void trace_record(const TraceRecord& record) {
  ThreadBuffer& b = this_thread_buffer();
  std::lock_guard lock(b.mutex);
  b.records.push_back(record);
}

void trace_start() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (auto& b : r.buffers) {
    std::lock_guard block(b->mutex);
    b->records.clear();
  }
  g_enabled.store(true, std::memory_order_relaxed);
}

std::vector<TraceRecord> trace_stop() {
  g_enabled.store(false, std::memory_order_relaxed);
  std::vector<TraceRecord> all;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (auto& b : r.buffers) {
    std::lock_guard block(b->mutex);
    all.insert(all.end(), b->records.begin(), b->records.end());
    b->records.clear();
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const TraceRecord& a, const TraceRecord& b) { return a.start_ns < b.start_ns; });
  return all;
}

bool trace_enabled() noexcept { return g_enabled.load(std::memory_order_relaxed); }

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace openreg::sim
