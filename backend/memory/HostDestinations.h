#pragma once
// Recycled host memory for the CPU tensors that device-to-host copies create (`.cpu()`,
// `.to("cpu")`): Note [Recycled host destinations] in memory/HostDestinations.cpp.

#include <c10/core/Allocator.h>

#include <cstddef>

#include "backend/Export.h"

namespace at::openreg {

//! Results of at least this many bytes are worth a recycled block; smaller ones come from glibc's heap.
inline constexpr std::size_t kRecycleAtLeast = std::size_t{1} << 20;
//! The allocator of recycled results' storages: at least kRecycleAtLeast bytes from the cache, smaller
//! sizes from the CPU allocator (so a resize of a result behaves as for any CPU tensor). Never destroyed.
c10::Allocator* host_destination_allocator();

//! Bytes of recycled host blocks held for reuse (none in use by a tensor).
OPENREG_BACKEND_API std::size_t host_destination_cached_bytes();
//! Returns every held block to the operating system (part of torch.openreg.empty_cache()).
OPENREG_BACKEND_API void host_destination_release_cached();

}  // namespace at::openreg
