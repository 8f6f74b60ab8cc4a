#include "openreg/sim/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <utility>
#include <unordered_map>
#include <vector>

#include "trace_recorder.h"

namespace openreg::sim {
namespace {

// Number of open sessions. relaxed: tracing is a diagnostic; a record racing with a session's open or
// close lands on either side of its cursor, never in a torn state (buffers are locked).
std::atomic<int> g_open_sessions{0};

thread_local std::uint64_t tl_correlation = kNoCorrelation;

struct ThreadBuffer {
  std::mutex mutex;
  std::vector<TraceRecord> records;  // guarded by mutex
  std::uint64_t base = 0;            // absolute index of records[0]; guarded by mutex
};

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;  // guarded by mutex; buffers outlive threads
  int open = 0;                                        // sessions open; guarded by mutex
  std::unique_ptr<TraceSession> default_session;       // trace_start/stop's; guarded by mutex
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

// A session's start: the absolute end of every buffer that existed when it opened. A buffer created
// later starts at 0, which is after the open. Buffers are only trimmed when no session is open, so an
// absolute index stays valid for the whole life of a session.
struct TraceSession::Cursors {
  std::unordered_map<const ThreadBuffer*, std::uint64_t> start;
};

void trace_record(const TraceRecord& record) {
  ThreadBuffer& b = this_thread_buffer();
  std::lock_guard lock(b.mutex);
  b.records.push_back(record);
}

TraceSession::TraceSession() : cursors_(std::make_unique<Cursors>()) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (auto& b : r.buffers) {
    std::lock_guard block(b->mutex);
    cursors_->start.emplace(b.get(), b->base + b->records.size());
  }
  ++r.open;
  g_open_sessions.store(r.open, std::memory_order_relaxed);
}

TraceSession::~TraceSession() { stop(); }

std::vector<TraceRecord> TraceSession::stop() {
  std::vector<TraceRecord> all;
  if (!cursors_) return all;
  Registry& r = registry();
  {
    std::lock_guard lock(r.mutex);
    const bool last = --r.open == 0;
    g_open_sessions.store(r.open, std::memory_order_relaxed);
    for (auto& b : r.buffers) {
      std::lock_guard block(b->mutex);
      auto it = cursors_->start.find(b.get());
      const std::uint64_t from = it == cursors_->start.end() ? 0 : it->second;
      const std::uint64_t skip = from > b->base ? from - b->base : 0;
      if (skip < b->records.size()) {
        all.insert(all.end(), b->records.begin() + static_cast<std::ptrdiff_t>(skip), b->records.end());
      }
      if (last) {  // nobody can ask for these any more
        b->base += b->records.size();
        b->records.clear();
      }
    }
  }
  cursors_.reset();
  std::stable_sort(all.begin(), all.end(),
                   [](const TraceRecord& a, const TraceRecord& b) { return a.start_ns < b.start_ns; });
  return all;
}

void trace_start() {
  // Sessions take the registry lock themselves, so they are opened and closed outside it.
  auto fresh = std::make_unique<TraceSession>();
  std::unique_ptr<TraceSession> old;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    old = std::exchange(r.default_session, std::move(fresh));
  }
}

std::vector<TraceRecord> trace_stop() {
  std::unique_ptr<TraceSession> session;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    session = std::move(r.default_session);
  }
  if (!session) return {};
  return session->stop();
}

bool trace_enabled() noexcept { return g_open_sessions.load(std::memory_order_relaxed) > 0; }

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void set_trace_correlation(std::uint64_t tag) noexcept { tl_correlation = tag; }

std::uint64_t trace_correlation() noexcept { return tl_correlation; }

}  // namespace openreg::sim
