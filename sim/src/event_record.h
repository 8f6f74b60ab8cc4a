#pragma once
// EventRecord: the completion state of ONE record of an event (see Note [Event records]).
// Shared by the event (as its most recent record), the record item that completes it, and every wait
// item that captured it; freed when the last of them lets go.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "progress_counter.h"

namespace openreg::sim {

class Stream;
struct WorkItem;

struct EventRecord {
  int device = -1;      // immutable after creation
  bool timing = false;  // immutable after creation: take a timestamp when completing

  // Written by the completer before `done` advances to 1 and never again, so anyone who saw
  // done.load() == 1 (acquire) may read them without the mutex.
  std::int64_t time_ns = 0;
  std::string failure;  // the recording stream's unreported failure when the record ran, or empty
  ProgressCounter done;  // 0 -> 1 when the record item ran

  // The failure is reported once through the event (query/synchronize); waits copy it regardless.
  std::atomic<bool> failure_reported{false};

  std::mutex mutex;  // makes "check done, else park" atomic with completion
  struct Waiter {
    Stream* stream;  // parked; kept alive by its own self-reference (it owns itself while parked)
    WorkItem* item;
  };
  std::vector<Waiter> waiters;  // guarded by mutex

  bool completed() const noexcept { return done.load() != 0; }
};

}  // namespace openreg::sim
