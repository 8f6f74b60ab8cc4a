#pragma once
// What timing-only execution (OPENREG_EXECUTE=timing) still runs for real: Note [Control data in
// timing-only execution] in sim/src/stream.cpp.

#include <cstddef>

namespace openreg::sim {

//! In timing-only execution, copies of at most this many bytes still move their data: the counts,
//! shapes and indices a program reads back to steer itself. 1 MiB: the caching allocator's
//! small-request bound, far above any such metadata and far below the tensors whose time is modelled.
inline constexpr std::size_t kTimingOnlyMovedBytes = std::size_t{1} << 20;

//! In timing-only execution, a kernel whose cost counts at most this many bytes read plus written still
//! runs: arithmetic on such control data (a pipeline schedule's product of the stages' votes,
//! recv_object_list's sum of the object sizes it received). 4 KiB: one page, so a kernel that runs
//! touches at most a few pages of the unbacked device memory, and no modelled tensor is that small.
inline constexpr std::size_t kTimingOnlyRunKernelBytes = std::size_t{4} << 10;

}  // namespace openreg::sim
