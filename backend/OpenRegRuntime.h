#pragma once
// The backend's view of the simulated runtime: device selection (per host thread, like CUDA), the
// mapping between c10::Stream and sim::Stream (through the typed handle OpenRegStream, see
// backend/OpenRegStream.h), and the translation of sim errors into PyTorch errors.
// Everything in backend/ reaches the sim layer through these functions.
//
// Thread-safety: every function may be called from any thread.

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include "backend/Export.h"
#include "backend/OpenRegStream.h"

#include <openreg/sim/config.h>
#include <openreg/sim/device.h>
#include <openreg/sim/runtime.h>
#include <openreg/sim/stream.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace c10::openreg {

//! The most devices openreg has: the size of the backend's per-device tables.
inline constexpr int kMaxDevices = ::openreg::sim::kMaxDevices;

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

//! The sim device (started on first use; checked).
OPENREG_BACKEND_API ::openreg::sim::Device& sim_device(c10::DeviceIndex index);

//! The calling thread's current stream on `index` (the default stream until changed); checks the index
//! but does not start the device (current_openreg_stream resolves the sim stream too).
OPENREG_BACKEND_API c10::Stream current_stream(c10::DeviceIndex index);
//! Makes `stream` current for its device on the calling thread; returns the previous one.
OPENREG_BACKEND_API c10::Stream exchange_stream(c10::Stream stream);
//! The device's default stream.
OPENREG_BACKEND_API c10::Stream default_stream(c10::DeviceIndex index);
//! A stream from the device's pool (round robin, 32 per priority), like CUDA's getStreamFromPool.
//! priority follows CUDA/torch: 0 is normal, negative is higher priority.
OPENREG_BACKEND_API c10::Stream stream_from_pool(c10::DeviceIndex index, int priority);

//! CUDA-convention priority of an openreg stream: 0 (normal) or -1 (high; see kGreatestStreamPriority).
OPENREG_BACKEND_API int stream_priority(const c10::Stream& stream);
//! torch.cuda.Stream.priority_range()'s (least, greatest): lower numbers are higher priorities, and
//! the sim has two levels. Requests beyond the range clamp to it, as CUDA's do.
using ::openreg::sim::kGreatestStreamPriority;
using ::openreg::sim::kLeastStreamPriority;

//! The sim stream behind a c10::Stream of type PrivateUse1 (checked: wrong type, device, unknown id).
//! Shorthand for OpenRegStream(stream).sim(); code that uses a stream more than once keeps the handle.
OPENREG_BACKEND_API ::openreg::sim::Stream& sim_stream(const c10::Stream& stream);
//! Shorthand for current_openreg_stream(index).sim() (a thread-local read once resolved).
OPENREG_BACKEND_API ::openreg::sim::Stream& current_sim_stream(c10::DeviceIndex index);

//! Blocks until all work on every stream of the device has run (raises the first failed item).
OPENREG_BACKEND_API void synchronize_device(c10::DeviceIndex index);

//! Nanoseconds of compute-thread time the device spent on work since it started, divided by its compute
//! threads (with one thread: the time during which at least one item ran); torch.openreg.utilization() samples it like nvidia-smi samples a GPU's busy time.
OPENREG_BACKEND_API std::uint64_t device_busy_time_ns(c10::DeviceIndex index);

//! Waits for all work queued on every device, reporting nothing; what the process runs at exit (Note
//! [Teardown at exit] in sim/src/runtime.cpp), and what the Python package runs before the interpreter
//! finalizes. Does nothing before the runtime started, in a forked child or on a device thread.
OPENREG_BACKEND_API void drain_at_exit() noexcept;

//! Pinned host memory, from the runtime's registry (so is_pinned answers for any pointer inside).
//! alloc_pinned gives nullptr for 0 bytes and raises OutOfMemoryError when the host has no memory;
//! free_pinned raises c10::Error for a pointer that is not a live pinned allocation.
void* alloc_pinned(std::size_t bytes);
void free_pinned(void* ptr);
bool is_pinned(const void* ptr);

//! "512 B", "1.50 KiB", "2.00 GiB": the sim's byte formatter, for messages and memory_summary.
OPENREG_BACKEND_API std::string format_bytes(std::uint64_t bytes);

//! What torch.openreg.get_device_properties reports.
struct DeviceProperties {
  std::string name;                  //!< "openreg"
  std::uint64_t total_memory;        //!< capacity in bytes
  int multi_processor_count;         //!< compute threads of the device's arena
  std::uint64_t copy_bandwidth;      //!< bytes/s per copy engine, 0 = unlimited
};
//! Properties of a device (checked; does not need the device to be started).
OPENREG_BACKEND_API DeviceProperties device_properties(c10::DeviceIndex index);

//! Runs `fn`, translating sim errors into PyTorch errors: OutOfMemoryError → c10::OutOfMemoryError,
//! kInvalidDevice → c10::AcceleratorError, kInvalidArgument/kInvalidStream/kInvalidEvent/kNotTimed/
//! kNotRecorded → c10::ValueError or c10::Error, kConfig → c10::Error naming the variable,
//! kWorkFailed → c10::Error with the item name.
template <typename Fn>
decltype(auto) translate_sim_errors(Fn&& fn);

}  // namespace c10::openreg

#include "OpenRegRuntimeInl.h"  // translate_sim_errors
