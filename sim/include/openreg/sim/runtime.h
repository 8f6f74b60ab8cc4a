#pragma once
// Runtime: the set of simulated devices of a process, plus pointer bookkeeping (which device owns an
// address, which host memory is pinned). Devices are created lazily on first use.
// Thread-safety: all members may be called from any thread concurrently.

#include <cstddef>
#include <memory>
#include <optional>

#include "openreg/sim/config.h"
#include "openreg/sim/device.h"
#include "openreg/sim/export.h"

namespace openreg::sim {

class VirtualClock;  // private to the library
class HostRecord;

class OPENREG_SIM_API Runtime {
 public:
  //! A runtime with its own devices (tests use several). `config` is resolved (throws ConfigError).
  explicit Runtime(const Config& config);
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  ~Runtime();  // destroys the started devices (each waits for its work)

  //! The process-wide runtime, configured from the environment on first call. A ConfigError is thrown
  //! on that call and again on every later call (the runtime never starts with a bad configuration).
  //! Never destroyed; the first call registers drain_at_exit() with std::atexit (Note [Teardown at exit]).
  static Runtime& global();
  //! Waits until the global runtime's devices have run all work queued on them, and the work that this
  //! work queues meanwhile; failures stay on their streams (nobody is left to report them to).
  //! What exit() runs (see global()); an interpreter calls it before it finalizes. Idempotent; does
  //! nothing before global() built the runtime, in a forked child (the devices' threads stayed in the
  //! parent) or on a device thread (an exit() from a kernel or host callback would wait for itself).
  static void drain_at_exit() noexcept;

  const Config& config() const noexcept;  //!< resolved configuration
  int device_count() const noexcept;      //!< config().device_count

  //! The device, started on first use. Throws kInvalidDevice for an index outside [0, device_count).
  Device& device(int index);
  //! Whether device(index) has been started (for hasPrimaryContext); false for bad indices.
  bool device_started(int index) const noexcept;
  //! Synchronizes every started device.
  void synchronize();

  //! Index of the device whose memory contains `ptr` (interior pointers too), or nullopt.
  std::optional<int> device_of(const void* ptr) const;
  //! Whether [ptr, ptr + bytes) holds the values a GPU would hold: DeviceMemory::holds_values of the
  //! device that owns it, true for host memory (Note [Values in timing-only execution] in stream.cpp).
  bool holds_values(const void* ptr, std::size_t bytes) const;
  //! DeviceMemory::set_holds_values of the device that owns `ptr`; nothing for host memory.
  void set_holds_values(const void* ptr, std::size_t bytes, bool holds);

  //! Allocates pinned (page-locked, simulated) host memory; zero bytes gives nullptr.
  void* host_alloc_pinned(std::size_t bytes);
  //! Frees pinned host memory; throws kInvalidPointer for foreign pointers or double frees.
  void host_free_pinned(void* ptr);
  //! Whether `ptr` lies inside a live pinned host allocation.
  bool is_pinned(const void* ptr) const;

  //! Virtual time (Note [Virtual time]): the device profile, or null when times are this host's.
  const DeviceProfile* profile() const noexcept;
  //! The calling thread's virtual time, ns since the runtime started (0 without a profile).
  std::int64_t virtual_now_ns();
  //! A device's virtual busy time and work so far (all zero without a profile). Throws for bad indices.
  DeviceTimeStats device_time_stats(int index);
  //! The virtual clock, or null without a profile (for the library's own use).
  VirtualClock* virtual_clock() const noexcept;
  //! A collective runs on device `index` over [start_ns, end_ns) of virtual time (ns since the runtime
  //! started; Note [Collective cost model] in sim/src/cost_model.cpp): counted as the device's
  //! communication, it slows the kernels placed over it from now on, and `end` (if given), the
  //! collective's host-completed record, ends at end_ns for the streams and hosts that wait on it and
  //! is traced over the span. Call before anything waits on `end`. Nothing without a profile; throws
  //! for a bad index or span.
  void place_communication(int index, std::int64_t start_ns, std::int64_t end_ns, HostRecord* end);

  // --- implementation-defined below ---
 private:
  struct State;
  std::unique_ptr<State> s_;
};

//! A graph launch on the calling host thread (Note [Graph launches on the virtual clock] in
//! sim/src/virtual_clock.cpp): constructing it charges the thread's virtual clock one launch (the one
//! cudaGraphLaunch call), and while it lives the items the thread issues cost no host time each (their
//! device times are unchanged). Nothing without a device profile. Not nestable.
class OPENREG_SIM_API GraphLaunchScope {
 public:
  GraphLaunchScope();
  ~GraphLaunchScope();
  GraphLaunchScope(const GraphLaunchScope&) = delete;
  GraphLaunchScope& operator=(const GraphLaunchScope&) = delete;
};

}  // namespace openreg::sim
