#include "schedule_fuzz.h"

#include <condition_variable>
#include <mutex>
#include <queue>
#include <thread>
#include <utility>
#include <vector>

namespace openreg::sim::detail {
namespace {

// splitmix64's finalizer: a cheap bijective mix, so nearby inputs give unrelated outputs.
std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr std::uint64_t kMaxBaseDelayUs = 400;  // an item's delay is up to this times its stream's slowness
constexpr std::uint64_t kMaxSlowness = 4;

class Timer {
 public:
  void add(std::chrono::steady_clock::time_point when, std::function<void()> fn) {
    {
      std::lock_guard lock(mutex_);
      if (!started_) {
        started_ = true;
        // Detached: the timer lives as long as the process (the runtime is leaked too, and devices
        // wait for their streams' parked items before they go away).
        std::thread([this] { run(); }).detach();
      }
      queue_.push({when, next_++, std::move(fn)});
    }
    cv_.notify_one();
  }

 private:
  struct Entry {
    std::chrono::steady_clock::time_point when;
    std::uint64_t order;  // ties run in submission order
    std::function<void()> fn;
    bool operator>(const Entry& o) const { return when != o.when ? when > o.when : order > o.order; }
  };

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (queue_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const auto when = queue_.top().when;
      if (std::chrono::steady_clock::now() < when) {
        cv_.wait_until(lock, when);  // an earlier entry may arrive meanwhile: re-check
        continue;
      }
      std::function<void()> fn = std::move(const_cast<Entry&>(queue_.top()).fn);
      queue_.pop();
      lock.unlock();  // the resumed stream may park its next item here again
      fn();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue_;  // guarded by mutex_
  std::uint64_t next_ = 0;                                               // guarded by mutex_
  bool started_ = false;                                                 // guarded by mutex_
};

Timer& timer() {
  static auto* t = new Timer;  // leaked: see Timer::add
  return *t;
}

}  // namespace

std::chrono::microseconds fuzz_delay(std::uint64_t seed, int device, std::uint64_t stream,
                                     std::uint64_t position) noexcept {
  const std::uint64_t stream_key = mix(seed ^ mix((static_cast<std::uint64_t>(device) << 48) ^ stream));
  const std::uint64_t h = mix(stream_key ^ mix(position));
  if ((h & 1) == 0) return std::chrono::microseconds(0);
  const std::uint64_t slowness = 1 + stream_key % kMaxSlowness;
  return std::chrono::microseconds(((h >> 1) % kMaxBaseDelayUs + 1) * slowness);
}

void run_after(std::chrono::microseconds delay, std::function<void()> resume) {
  timer().add(std::chrono::steady_clock::now() + delay, std::move(resume));
}

}  // namespace openreg::sim::detail
