#pragma once
// Intra-op parallelism of kernels running on a device's compute threads.
//
// ATen's CPU kernels parallelize with OpenMP, whose thread count is a per-thread setting (the
// nthreads ICV of the calling thread), and MKL likewise has a per-thread setting. A kernel that runs
// alone on a device may use all the device's compute threads; kernels of several streams running at
// once on the device split them, so the device never runs more threads than it was given and two
// devices never oversubscribe the machine between them.
//
// Thread-safety: each scope touches only the calling thread's settings and an atomic counter per device.

namespace at::openreg {

class IntraOpThreadsScope {
 public:
  //! Counts this kernel as running on `device` (which has `compute_threads` threads) and sets the
  //! calling thread's OpenMP/MKL thread count to its share.
  IntraOpThreadsScope(int device, int compute_threads);
  ~IntraOpThreadsScope();  // uncounts the kernel
  IntraOpThreadsScope(const IntraOpThreadsScope&) = delete;
  IntraOpThreadsScope& operator=(const IntraOpThreadsScope&) = delete;

  //! The share this scope gave its thread.
  int threads() const noexcept { return threads_; }

 private:
  int device_;
  int threads_;
};

}  // namespace at::openreg
