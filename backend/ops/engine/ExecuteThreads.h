#pragma once

#include "backend/Export.h"

#include <c10/macros/Macros.h>

#include <cstdint>

// Intra-op parallelism of kernels running on a device's compute threads.
//
// ATen's CPU kernels parallelize with OpenMP, whose thread count is a per-thread setting (the
// nthreads ICV of the calling thread), and MKL likewise has a per-thread setting. A kernel that runs
// alone may use all the device's compute threads (all cores by default) but the core of the issuing host
// thread while it is awake (Note [The issuing host keeps a core] in ExecuteThreads.cpp); kernels running
// at once split them, on one device (its cap) and across devices (the machine's cores, which all devices' arenas
// share: Note [Elastic device concurrency]), so kernels together never oversubscribe the machine. A
// device whose last kernel ended less than a sharing window ago still counts as sharing the machine
// (Note [Devices that share the cores] in ops/engine/ExecuteThreads.cpp).
//
// Thread-safety: each scope touches only the calling thread's settings and, per device, an atomic
// counter and the atomic time its last kernel ended.

namespace at::openreg {

//! The work (multiply-adds) from which a kernel counts as long: about 3 ms on one core, longer than the
//! issuing host's usual burst before it sleeps (Note [The issuing host keeps a core]).
inline constexpr std::int64_t kLongKernelWork = std::int64_t{1} << 27;

class OPENREG_BACKEND_API IntraOpThreadsScope {
 public:
  //! Counts this kernel as running on `device` (whose arena cap is `compute_threads`) and sets the
  //! calling thread's OpenMP/MKL thread count to its share of the device and of the machine; a kernel
  //! that `outlasts_host` (kLongKernelWork) takes the issuing host's core too.
  IntraOpThreadsScope(int device, int compute_threads, bool outlasts_host = false);
  ~IntraOpThreadsScope();  // uncounts the kernel
  C10_DISABLE_COPY_AND_ASSIGN(IntraOpThreadsScope);

  //! The share this scope gave its thread.
  int threads() const noexcept { return threads_; }

 private:
  int device_;
  int threads_;
};

//! Runs CPU kernels on the calling host thread (main or autograd) with one OpenMP/MKL thread for its
//! lifetime, then restores the thread's count (Note [Host threads open no OpenMP teams] in
//! ops/engine/ExecuteThreads.cpp). For kernels the host runs only to learn something about an op (the coverage
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
