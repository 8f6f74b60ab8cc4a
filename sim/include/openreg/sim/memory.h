#pragma once
// DeviceMemory: the per-device heap. Allocations come from host memory but are owned and accounted per
// device, with a capacity. Thread-safety: all members may be called from any thread concurrently.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "openreg/sim/export.h"

namespace openreg::sim {

class OPENREG_SIM_API DeviceMemory {
 public:
  //! Alignment of every device allocation (and of pinned host allocations).
  static constexpr std::size_t kAlignment = 256;

  //! Allocates `bytes` (> 0) of device memory. Throws OutOfMemoryError when the capacity would be
  //! exceeded. A zero-byte request returns nullptr and accounts nothing.
  void* allocate(std::size_t bytes);
  //! Frees an allocation of this device. Throws kInvalidPointer for nullptr-free (no-op, no throw),
  //! foreign pointers, interior pointers and double frees — never undefined behaviour.
  void free(void* ptr);

  std::uint64_t allocated() const noexcept;          //!< bytes currently allocated
  std::uint64_t peak() const noexcept;               //!< highest allocated() since start or reset_peak()
  std::uint64_t capacity() const noexcept;           //!< configured capacity in bytes
  std::uint64_t allocation_count() const noexcept;   //!< live allocations
  void reset_peak() noexcept;                        //!< peak = allocated()

  // --- implementation-defined below ---
  //! `backed`: false for timing-only execution: allocations are reserved address space whose pages
  //! are never committed unless written (reads see zeros), so a device can hold a GPU's capacity.
  DeviceMemory(int device, std::uint64_t capacity, bool backed = true);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  //! The [begin, end) of the live allocation containing `ptr`, or false. For Runtime::device_of and copies.
  bool find(const void* ptr, std::uintptr_t* begin, std::uintptr_t* end) const;
  //! Whether every byte of [ptr, ptr + bytes) holds the value a GPU would hold (Note [Values in
  //! timing-only execution] in stream.cpp). Always true on a backed device, where everything runs.
  bool holds_values(const void* ptr, std::size_t bytes) const;
  //! Notes that [ptr, ptr + bytes) now holds values (`holds`), or holds none. A no-op on a backed
  //! device. Freeing an allocation forgets its values.
  void set_holds_values(const void* ptr, std::size_t bytes, bool holds);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace openreg::sim
