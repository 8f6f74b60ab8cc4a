#pragma once
// Device: one simulated accelerator. Owns oneTBB task arenas (its compute units), a memory heap with a
// capacity, copy engines, a default stream and the streams created on it. Created lazily by Runtime.
// Thread-safety: all members may be called from any thread concurrently.

#include <cstdint>
#include <functional>
#include <memory>

#include "openreg/sim/memory.h"
#include "openreg/sim/stream.h"
#include "openreg/sim/export.h"

namespace openreg::sim {

class Runtime;
class CopyEngine;  // private to the library

//! Installs `hook` (nullptr: none), called on a compute thread each time it leaves a device's arena
//! because that device has no more work for it for now. For per-thread resources that a kernel
//! library keeps between kernels and that cost the rest of the process while they live (an OpenMP
//! team: see backend/engine/ExecuteThreads.cpp). It must not throw or block on device work. Any thread,
//! any time; devices read it at each exit.
OPENREG_SIM_API void set_compute_thread_idle_hook(void (*hook)()) noexcept;

class OPENREG_SIM_API Device {
 public:
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device();  // waits for all work, stops the copy engines

  int index() const noexcept;                    //!< this device's index
  int compute_threads() const noexcept;          //!< its compute units: how many kernels run at once
  std::uint64_t copy_bandwidth() const noexcept; //!< bytes/s per copy engine, or kUnlimitedBandwidth
  Runtime& runtime() const noexcept;             //!< the runtime that owns it
  //! Total time its compute threads have spent running its work (kernels, host callbacks, the
  //! scheduling around them), summed over threads, in ns since creation. Monotonic;
  //! one relaxed atomic load. utilization over an interval = delta busy / (delta wall * compute_threads()).
  std::uint64_t busy_time_ns() const noexcept;
  DeviceMemory& memory() noexcept;               //!< its heap

  //! The default stream (id kDefaultStreamId); lives as long as the device.
  const std::shared_ptr<Stream>& default_stream() const noexcept;
  //! Creates a new stream with a fresh id.
  std::shared_ptr<Stream> create_stream(StreamPriority priority = StreamPriority::kNormal);
  //! Looks a stream up by id; throws kInvalidStream for an unknown or destroyed id.
  std::shared_ptr<Stream> stream(StreamId id) const;
  //! Waits for the stream's work, then removes it: later use of the id, or enqueue through a kept
  //! reference, throws kInvalidStream. Destroying the default stream throws kInvalidStream.
  void destroy_stream(StreamId id);

  //! Blocks until all work on all streams of this device has run; then takes every unreported failure
  //! of its streams and throws one WorkFailed naming the first and counting the others.
  void synchronize();

  //! Runs `body` on the calling thread inside an arena of the device's whole concurrency, so that the
  //! oneTBB parallel algorithms it calls (a kernel's tbb::parallel_for) use up to compute_threads()
  //! threads. A kernel itself runs on one of the device's lanes, of concurrency 1 (Note [Device lanes]
  //! in device.cpp), where such algorithms run serially. Returns when body does; exceptions propagate.
  void parallel(const std::function<void()>& body);

  // --- implementation-defined below (constructor is for Runtime) ---
 private:
  friend class Runtime;
  friend class Stream;
  friend class CopyEngine;
  struct State;
  Device(Runtime& runtime, int index);
  void schedule(Stream& stream);  // puts a stream that has work on its ready queue and wakes a worker
  bool has_ready_streams() const noexcept;  // some stream waits on the ready queue for a worker
  void add_busy_time(std::uint64_t ns) noexcept;  // a kernel or host callback of this device ran for ns
  // synchronize() without taking failures (destructor, Note [Teardown at exit] in runtime.cpp);
  // returns the items ever enqueued on the device, counted before it waited.
  std::uint64_t wait_idle();
  CopyEngine& copy_engine(bool inbound);  // host-to-device engine, or the one for all other copies

  std::unique_ptr<State> s_;
};

}  // namespace openreg::sim
