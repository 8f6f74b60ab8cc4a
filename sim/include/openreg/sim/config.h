#pragma once
// Runtime configuration: fixed when a Runtime is constructed. Runtime::global() reads it from the
// OPENREG_* environment variables once; tests construct Runtimes with explicit Configs.

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "openreg/sim/export.h"
#include "openreg/sim/profile.h"
#include "openreg/sim/virtual_time.h"

namespace openreg::sim {

//! copy_bandwidth value meaning "no limit": a copy takes only the time its memcpy takes.
inline constexpr std::uint64_t kUnlimitedBandwidth = 0;
//! compute_threads / memory_capacity value meaning "derive from the machine" (see Config::resolved).
inline constexpr std::uint64_t kDerive = 0;

//! The most devices a runtime has (OPENREG_DEVICE_COUNT's upper bound); layers above size per-device
//! tables with it.
inline constexpr int kMaxDevices = 64;

//! Launch queue depth: default (about CUDA's) and valid range of Config::launch_queue_depth.
inline constexpr std::uint64_t kDefaultLaunchQueueDepth = 1024;
inline constexpr std::uint64_t kMinLaunchQueueDepth = 1;
inline constexpr std::uint64_t kMaxLaunchQueueDepth = std::uint64_t{1} << 20;

//! OPENREG_SANITIZER's values. The race checker lives above the sim (backend/sanitizer/); the variable is
//! parsed here with the others, when the runtime starts, so a bad value is the same ConfigError.
enum class RaceCheckMode : int {
  kOff = 0,     //!< "0" or unset: off unless the program turns it on
  kRaise = 1,   //!< "1": raise at the op that completes a race
  kReport = 2,  //!< "report": record every race, report at exit
};

//! OPENREG_EXECUTE's values (Note [Timing-only execution] in sim/src/stream.cpp).
enum class ExecuteMode : int {
  kCompute = 0,  //!< "compute" (default): kernels and copies run
  kTiming = 1,   //!< "timing": kernels and copies are only timed on the virtual clock; memory is unbacked
};

//! Plain value type; not thread-safe to mutate while shared, safe to copy.
struct OPENREG_SIM_API Config {
  int device_count = 2;                                 //!< OPENREG_DEVICE_COUNT, 1..kMaxDevices
  int compute_threads = kDerive;                        //!< OPENREG_COMPUTE_THREADS: cap on each device's arena
  std::uint64_t memory_capacity = kDerive;              //!< OPENREG_MEMORY_CAPACITY: bytes per device
  std::uint64_t copy_bandwidth = kUnlimitedBandwidth;   //!< OPENREG_COPY_BANDWIDTH: bytes/s per copy engine
  //! OPENREG_LAUNCH_QUEUE_DEPTH: work items a stream holds queued (not yet completed) before the host
  //! thread issuing more waits for the device; kMinLaunchQueueDepth..kMaxLaunchQueueDepth.
  //! See Note [Bounded launch queue].
  std::uint64_t launch_queue_depth = kDefaultLaunchQueueDepth;
  //! OPENREG_SCHEDULE_FUZZ: a seed (0..10^18-1) turns on schedule fuzzing, random delays of each
  //! stream's items that are the same for the same seed; unset: off. See Note [Schedule fuzzing].
  std::optional<std::uint64_t> schedule_fuzz_seed;
  //! OPENREG_SANITIZER: the mode the backend's stream race checker starts in. The sim never reads it.
  RaceCheckMode race_check = RaceCheckMode::kOff;
  //! OPENREG_DEVICE_PROFILE: a shipped profile's name or a profile file's path; every device becomes a
  //! model of that GPU and every time openreg reports is virtual (Note [Virtual time]). Null: host time.
  std::shared_ptr<const DeviceProfile> device_profile;
  //! OPENREG_HOST_TIME: how host threads' virtual clocks advance (only with a device profile).
  HostTimeMode host_time = HostTimeMode::kModelled;
  //! OPENREG_EXECUTE: timing-only execution needs a device profile; its memory capacity defaults to
  //! the profile's (reserved address space, no backing pages).
  ExecuteMode execute = ExecuteMode::kCompute;

  //! Defaults overridden by the OPENREG_* environment variables, then resolved.
  //! Throws ConfigError naming the variable when a value is malformed or out of range.
  static Config from_env();

  //! A copy with every kDerive field filled in and every field validated (throws ConfigError):
  //! compute_threads = the cores this process may run on: each arena's cap, not a reservation; all
  //! devices' lanes share oneTBB's one worker pool (Note [Elastic device concurrency] in device.cpp);
  //! memory_capacity = physical memory / (2 * device_count).
  Config resolved() const;
};

//! Parses a byte count such as "1048576", "512K", "64MiB", "1.5G", "2GB" (K/M/G/T are powers of 1024;
//! an optional "B" or "iB" suffix is accepted). Throws ConfigError naming `variable` when malformed.
OPENREG_SIM_API std::uint64_t parse_byte_size(std::string_view text, std::string_view variable);

}  // namespace openreg::sim
