#pragma once
// Pinned host memory, from the runtime's registry (so is_pinned answers for any pointer inside a block).
// The caching host allocator (memory/HostAllocator.h) sits on top of it.
//
// Thread-safety: every function may be called from any thread.

#include <cstddef>

namespace c10::openreg {

//! nullptr for 0 bytes; raises OutOfMemoryError when the host has no memory.
void* alloc_pinned(std::size_t bytes);
//! Raises c10::Error for a pointer that is not a live pinned allocation.
void free_pinned(void* ptr);
//! Whether `ptr` lies inside a live pinned allocation.
bool is_pinned(const void* ptr);

}  // namespace c10::openreg
