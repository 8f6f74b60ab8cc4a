#pragma once
// CopyEngine: a device's DMA engine. A dedicated thread takes copies one at a time from a FIFO,
// memcpys them, then, when a bandwidth is configured, waits (sleeps, no spinning) until the copy's
// simulated duration bytes/bandwidth has passed since it started. It then completes the item and
// resumes the stream that handed it over (the stream was parked meanwhile, holding no worker).
//
// Ownership: a submitted item is owned by the engine until it calls Stream::resume; the stream is
// kept alive by its own self-reference while it has pending work. The idle thread blocks on a
// condition variable (0% CPU).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace openreg::sim {

class Stream;
struct WorkItem;

class CopyEngine {
 public:
  //! `name` is for traces/debuggers ("openreg:0 h2d"); bandwidth in bytes/s, 0 = unlimited. Without
  //! `execute` (timing-only execution) copies move nothing: a host destination reads zeros.
  CopyEngine(int device, std::string name, std::uint64_t bandwidth, bool execute = true);
  ~CopyEngine();  // finishes submitted copies, then joins the thread
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  //! Queues the copy `item` of `stream`; the engine resumes the stream when it is done.
  void submit(Stream& stream, WorkItem* item);

 private:
  struct Job {
    Stream* stream;
    WorkItem* item;
  };
  void run();

  const int device_;
  const std::string name_;
  const std::uint64_t bandwidth_;
  const bool execute_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;  // guarded by mutex_
  bool stop_ = false;     // guarded by mutex_
  std::thread thread_;    // last: started once the members above exist
};

}  // namespace openreg::sim
