#pragma once
// Streams as the backend sees them: the checked handle OpenRegStream, the calling thread's current
// stream of each device, the default stream and the stream pool, and CUDA's priorities.
//
// Note [OpenRegStream: a checked stream handle]
// torch carries streams as c10::Stream (device type, index, id); every use of one needs the sim
// stream behind it. OpenRegStream pairs the two, as c10::cuda::CUDAStream pairs a c10::Stream with its
// cudaStream_t: building one from a c10::Stream checks it ONCE (device type, device index, stream id)
// and resolves the sim stream; afterwards the handle is used without further checks or lookups. The
// guard, the op engine, copies and the allocator all take streams this way.
//
// The current stream of each device is a thread-local OpenRegStream (like CUDA's current stream, per
// host thread): current_openreg_stream() reads it without a lock or a hash lookup once the thread has
// resolved it.
//
// Thread-safety: a handle is an immutable value; copy it freely across threads. The sim stream it
// points to lives as long as the process (the backend never destroys streams).

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include "backend/Export.h"

namespace openreg::sim {
class Stream;
}  // namespace openreg::sim

namespace c10::openreg {

class OPENREG_BACKEND_API OpenRegStream {
 public:
  //! Checks `stream` (an openreg stream of an existing device that the device created) and resolves
  //! its sim stream. Throws c10::ValueError for another device type or an unknown id,
  //! c10::AcceleratorError for a bad device index.
  explicit OpenRegStream(c10::Stream stream);

  //! The c10::Stream torch sees.
  c10::Stream unwrap() const noexcept { return stream_; }
  operator c10::Stream() const noexcept { return stream_; }  // NOLINT(google-explicit-constructor)

  c10::DeviceIndex device_index() const noexcept { return stream_.device_index(); }
  c10::Device device() const noexcept { return stream_.device(); }
  c10::StreamId id() const noexcept { return stream_.id(); }

  //! The sim stream behind the handle (no lookup), as CUDAStream::stream() gives the cudaStream_t: for
  //! the layers that own a sim concept (runtime/, memory/, engine/), which include its header.
  ::openreg::sim::Stream& sim() const noexcept { return *sim_; }
  //! The sim stream's address as torch's opaque native handle (Stream.native_handle).
  void* native_handle() const noexcept { return sim_; }

  //! CUDA-convention priority: 0 (normal) or -1 (high).
  int priority() const noexcept;

  //! Whether all work enqueued on the stream has run (raises the first failed item, translated).
  bool query() const;
  //! Blocks until all work enqueued before the call has run (raises the first failed item, translated).
  //! Does not itself report to the sync debug mode: callers that are a user-visible sync do.
  void synchronize() const;

  bool operator==(const OpenRegStream& other) const noexcept { return stream_ == other.stream_; }
  bool operator!=(const OpenRegStream& other) const noexcept { return !(*this == other); }

 private:
  friend struct OpenRegStreamAccess;
  //! For streams already known valid (the runtime's own tables); no check.
  OpenRegStream(c10::Stream stream, ::openreg::sim::Stream* sim) noexcept : stream_(stream), sim_(sim) {}

  c10::Stream stream_;
  ::openreg::sim::Stream* sim_;
};

//! The calling thread's current stream on device `index` (the default stream until changed). The
//! index is checked the first time a thread asks for it; then it is a thread-local read.
OPENREG_BACKEND_API OpenRegStream current_openreg_stream(c10::DeviceIndex index);
//! The device's default stream (checked).
OPENREG_BACKEND_API OpenRegStream default_openreg_stream(c10::DeviceIndex index);
//! Makes `stream` current for its device on the calling thread; returns the previous current stream.
OPENREG_BACKEND_API OpenRegStream exchange_openreg_stream(const OpenRegStream& stream);

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

//! torch.cuda.Stream.priority_range()'s (least, greatest): lower numbers are higher priorities, and
//! the sim has two levels (checked against the sim's in Stream.cpp). Requests beyond the range clamp to
//! it, as CUDA's do.
inline constexpr int kLeastStreamPriority = 0;
inline constexpr int kGreatestStreamPriority = -1;
//! CUDA-convention priority of an openreg stream: 0 (normal) or -1 (high; see kGreatestStreamPriority).
OPENREG_BACKEND_API int stream_priority(const c10::Stream& stream);

//! The sim stream behind a c10::Stream of type PrivateUse1 (checked: wrong type, device, unknown id).
//! Shorthand for OpenRegStream(stream).sim(); code that uses a stream more than once keeps the handle.
OPENREG_BACKEND_API ::openreg::sim::Stream& sim_stream(const c10::Stream& stream);
//! Shorthand for current_openreg_stream(index).sim() (a thread-local read once resolved).
OPENREG_BACKEND_API ::openreg::sim::Stream& current_sim_stream(c10::DeviceIndex index);

}  // namespace c10::openreg
