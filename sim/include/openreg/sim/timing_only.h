#pragma once
// What timing-only execution (OPENREG_EXECUTE=timing) still runs for real: Note [Control data in
// timing-only execution] in sim/src/stream.cpp.

#include <cstddef>

namespace openreg::sim {

//! In timing-only execution, copies of at most this many bytes still move their data: the counts,
//! shapes and indices a program reads back to steer itself. 1 MiB: the caching allocator's
//! small-request bound, far above any such metadata and far below the tensors whose time is modelled.
inline constexpr std::size_t kTimingOnlyMovedBytes = std::size_t{1} << 20;

}  // namespace openreg::sim
