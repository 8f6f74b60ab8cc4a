#pragma once
// Devices as the backend sees them: how many there are, which one is current on the calling host thread
// (per thread, like CUDA), starting one, waiting for one, and what torch.openreg reports about one.
// The runtime starts on the first call that needs it (reading the OPENREG_* variables).
//
// Thread-safety: every function may be called from any thread.

#include <c10/core/Device.h>

#include "backend/Export.h"

#include <cstdint>
#include <optional>
#include <string>

namespace openreg::sim {
class Device;
class Runtime;
}  // namespace openreg::sim

namespace c10::openreg {

//! The most devices openreg has: the size of the backend's per-device tables (the sim's limit; checked
//! against it in Device.cpp).
inline constexpr int kMaxDevices = 64;

//! Number of simulated devices; 0 if the runtime cannot start (bad configuration). Never throws.
OPENREG_BACKEND_API c10::DeviceIndex device_count() noexcept;

//! Starts the runtime (reads OPENREG_* variables). Throws a c10 error naming a malformed variable.
OPENREG_BACKEND_API void init();

//! Throws c10::AcceleratorError (torch.AcceleratorError, a RuntimeError, as CUDA's "invalid device
//! ordinal" is) for an index outside [0, device_count()), with a message giving the valid range.
void check_device_index(c10::DeviceIndex index);
//! check_device_index for an index that is not yet a DeviceIndex (a Python int, an int64): checked as
//! the full integer, so 256 never wraps to 0 nor 128 to -128; returns it narrowed.
OPENREG_BACKEND_API c10::DeviceIndex checked_device_index(std::int64_t index);

//! The calling thread's current device (0 until set_device is called on this thread).
OPENREG_BACKEND_API c10::DeviceIndex current_device();
//! Sets the calling thread's current device (checked).
OPENREG_BACKEND_API void set_device(c10::DeviceIndex index);
//! Sets the current device and returns the previous one (checked).
OPENREG_BACKEND_API c10::DeviceIndex exchange_device(c10::DeviceIndex index);

//! The sim device (started on first use; checked). For the layers that own a sim concept (runtime/,
//! memory/, engine/: see docs/design.md) and for tests.
OPENREG_BACKEND_API ::openreg::sim::Device& sim_device(c10::DeviceIndex index);
//! Whether the device has started (a "primary context", in CUDA's words); checked, starts nothing.
OPENREG_BACKEND_API bool device_started(c10::DeviceIndex index);
//! The device whose memory holds `ptr`, if any (device memory only; pinned host memory is no device's).
OPENREG_BACKEND_API std::optional<c10::DeviceIndex> device_of_pointer(const void* ptr);

//! Blocks until all work on every stream of the device has run (raises the first failed item).
OPENREG_BACKEND_API void synchronize_device(c10::DeviceIndex index);

//! Nanoseconds of compute-thread time the device spent on work since it started, divided by its compute
//! threads (with one thread: the time during which at least one item ran); torch.openreg.utilization()
//! samples it like nvidia-smi samples a GPU's busy time.
OPENREG_BACKEND_API std::uint64_t device_busy_time_ns(c10::DeviceIndex index);

//! What torch.openreg.get_device_properties reports.
struct DeviceProperties {
  std::string name;                  //!< "openreg"
  std::uint64_t total_memory;        //!< capacity in bytes
  int multi_processor_count;         //!< compute threads of the device's arena
  std::uint64_t copy_bandwidth;      //!< bytes/s per copy engine, 0 = unlimited
};
//! Properties of a device (checked; does not need the device to be started).
OPENREG_BACKEND_API DeviceProperties device_properties(c10::DeviceIndex index);

namespace detail {
//! The started runtime (starts it; throws the configuration error of a bad environment, and refuses a
//! forked child). For runtime/*.cpp only.
::openreg::sim::Runtime& started_runtime();
}  // namespace detail

}  // namespace c10::openreg
