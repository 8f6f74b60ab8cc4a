#pragma once
// What timing-only execution (OPENREG_EXECUTE=timing) still runs for real: Note [Values in timing-only
// execution] in sim/src/stream.cpp.

#include <cstddef>
#include <span>

namespace openreg::sim {

//! In timing-only execution, a copy from the host of at most this many bytes moves its data: the
//! counts, shapes, indices and token ids a program computes with and reads back to steer itself. So
//! does a kernel that reads nothing (a fill, an arange) and writes at most this many bytes. 1 MiB: the
//! caching allocator's small-request bound, far above any such data and far below the tensors whose
//! time is modelled.
inline constexpr std::size_t kTimingOnlyMovedBytes = std::size_t{1} << 20;

//! In timing-only execution, a kernel whose inputs all hold values runs if it reads plus writes at most
//! this many bytes, and a device-to-device or device-to-host copy of such values moves them. Values
//! only come from the host in pieces of at most kTimingOnlyMovedBytes, so what is computed from them
//! stays small (a mask over the position ids, the sequence lengths, a pipeline schedule's votes); the
//! bound keeps one that grows (an expand made contiguous) from committing pages of the unbacked memory.
inline constexpr std::size_t kTimingOnlyValuedKernelBytes = std::size_t{16} << 20;

//! A kernel whose cost counts at most this many bytes read plus written runs in timing-only execution
//! when nothing says what it reads (a launch without KernelAccess: compiled kernels, graph replays),
//! and what it raises is dropped: its inputs may hold no values.
inline constexpr std::size_t kTimingOnlyRunKernelBytes = std::size_t{4} << 10;

//! Device memory a kernel reads or writes: `bytes` from `data`.
struct ByteRange {
  const void* data = nullptr;
  std::size_t bytes = 0;
};

//! What a kernel reads and writes, for timing-only execution's values (Note [Values in timing-only
//! execution]): every device range whose values it reads (an in-place op's self too, unless it only
//! overwrites it), and every range it writes.
struct KernelAccess {
  std::span<const ByteRange> reads;
  std::span<const ByteRange> writes;
};

}  // namespace openreg::sim
