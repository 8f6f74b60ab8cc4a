#pragma once

#include "backend/Export.h"

#include <c10/macros/Macros.h>

#include <cstdint>

// Intra-op parallelism of kernels running on a device's compute threads.
//
// ATen's CPU kernels parallelize with OpenMP, whose thread count is a per-thread setting (the
// nthreads ICV of the calling thread), and MKL likewise has a per-thread setting. A kernel's team is
// decided when it is issued, from the program's issue order, so that its results (a reduction's
// grouping follows the team) are the same on every run (Note [A kernel's team is decided at issue] in
// engine/ExecuteThreads.cpp): every core of the device's cap but the issuing host's (Note [The
// issuing host keeps a core]), split between the device's recently used streams and the devices the
// process has used (Note [Devices that share the cores]).
//
// Thread-safety: team_at_issue may be called from any thread (relaxed atomics; repeatable when each
// device's kernels are issued in program order); each scope touches only the calling thread's settings.

namespace at::openreg {

//! The work (multiply-adds) from which a kernel counts as long: about 3 ms on one core, longer than the
//! issuing host's usual burst before it sleeps (Note [The issuing host keeps a core]).
inline constexpr std::int64_t kLongKernelWork = std::int64_t{1} << 27;

//! The intra-op team of a kernel issued now on stream `stream` of `device` (whose arena cap is
//! `compute_threads`); a `long_kernel` (kLongKernelWork) takes the issuing host's core too. Counts the
//! issue: call once per kernel, on the issuing thread.
OPENREG_BACKEND_API int team_at_issue(int device, std::int64_t stream, int compute_threads, bool long_kernel) noexcept;

class OPENREG_BACKEND_API IntraOpThreadsScope {
 public:
  //! Sets the calling thread's OpenMP/MKL thread count to `threads` (at least 1) for the kernel it runs.
  explicit IntraOpThreadsScope(int threads);
  C10_DISABLE_COPY_AND_ASSIGN(IntraOpThreadsScope);

  //! The count this scope gave its thread.
  int threads() const noexcept { return threads_; }

 private:
  int threads_;
};

//! Runs CPU kernels on the calling host thread (main or autograd) with one OpenMP/MKL thread for its
//! lifetime, then restores the thread's count (Note [Host threads open no OpenMP teams] in
//! engine/ExecuteThreads.cpp). For kernels the host runs only to learn something about an op (the coverage
//! probe, the shape pass on scratch data), never for the program's own work.
class OPENREG_BACKEND_API SerialHostKernelScope {
 public:
  SerialHostKernelScope();
  ~SerialHostKernelScope();
  C10_DISABLE_COPY_AND_ASSIGN(SerialHostKernelScope);

 private:
  int previous_omp_;
  int previous_mkl_;
};

}  // namespace at::openreg
