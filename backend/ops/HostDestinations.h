#pragma once
// Recycled host memory for the CPU tensors that device-to-host copies create (`.cpu()`,
// `.to("cpu")`): Note [Recycled host destinations] in HostDestinations.cpp.

#include <cstddef>

#include "backend/Export.h"

namespace at::openreg {

//! Bytes of recycled host blocks held for reuse (none in use by a tensor).
OPENREG_BACKEND_API std::size_t host_destination_cached_bytes();
//! Returns every held block to the operating system (part of torch.openreg.empty_cache()).
OPENREG_BACKEND_API void host_destination_release_cached();

}  // namespace at::openreg
