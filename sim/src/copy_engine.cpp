#include "copy_engine.h"

#include <chrono>
#include <cstring>

#include "openreg/sim/stream.h"
#include "openreg/sim/trace.h"
#include "trace_recorder.h"
#include "work_item.h"

namespace openreg::sim {

CopyEngine::CopyEngine(int device, std::string name, std::uint64_t bandwidth)
    : device_(device), name_(std::move(name)), bandwidth_(bandwidth), thread_([this] { run(); }) {}

CopyEngine::~CopyEngine() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void CopyEngine::submit(Stream& stream, WorkItem* item) {
  std::lock_guard lock(mutex_);
  jobs_.push_back({&stream, item});
  // Under the lock: once the engine can run the copy, the device may finish all its work and destroy
  // this engine, so the caller must be done with it by then (the engine needs the lock to proceed).
  cv_.notify_one();
}

void CopyEngine::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_ and drained: every submitted copy has completed
      job = jobs_.front();
      jobs_.pop_front();
    }
    WorkItem& item = *job.item;
    const std::int64_t start = now_ns();
    std::memmove(item.dst, item.src, item.bytes);  // memmove: a same-device copy may overlap
    if (bandwidth_ != 0) {
      // The simulated transfer time, slept (not spun) so the engine costs no CPU while "busy".
      const auto duration = std::chrono::nanoseconds(
          static_cast<std::int64_t>(static_cast<long double>(item.bytes) * 1e9L / static_cast<long double>(bandwidth_)));
      std::this_thread::sleep_until(std::chrono::steady_clock::time_point(std::chrono::nanoseconds(start)) + duration);
    }
    if (trace_enabled()) {
      trace_record({item.name, device_, job.stream->id(), ItemKind::kCopy, start, now_ns(), item.bytes,
                    item.correlation, item.enqueue_ns});
    }
    // Dispatches the stream's next copies/events from this thread (Note [Dispatching off the
    // device]); may free the stream: touch neither afterwards.
    job.stream->resume_here(job.item);
  }
}

}  // namespace openreg::sim
