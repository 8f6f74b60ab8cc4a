#pragma once
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

#include <openreg/sim/stream.h>

#include "backend/Export.h"

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

  //! The sim stream behind the handle (no lookup).
  ::openreg::sim::Stream& sim() const noexcept { return *sim_; }

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

}  // namespace c10::openreg
