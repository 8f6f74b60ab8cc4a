#pragma once
// Virtual time for the layers above the runtime (Note [Virtual time] in sim/src/virtual_clock.cpp):
// the device profile (OPENREG_DEVICE_PROFILE), the calling thread's virtual clock and each device's
// virtual busy time. torch.openreg.timing and utilization() read them.
//
// Thread-safety: every function may be called from any thread.

#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "backend/Export.h"

namespace c10::openreg {

//! What the layers above need of the device profile.
struct ProfileSummary {
  std::string name;          //!< "h100-sxm"
  std::string display_name;  //!< "H100 SXM"
  int sm_count = 0;
  std::uint64_t l2_bytes = 0;
  std::uint64_t memory_bytes = 0;
  double bf16_tensor_flops = 0;  //!< dense peak, FLOP/s
  double memory_bandwidth = 0;   //!< bytes/s
  int ranks_per_node = 1;        //!< GPUs per node (collectives' default node size)
  double launch_ns = 0;          //!< host time of one launch call
  double host_op_ns = 0;         //!< the framework's host work per op (modelled host time)
};

//! The profile, or nullopt when times are this host's (starts the runtime).
OPENREG_BACKEND_API std::optional<ProfileSummary> device_profile();

//! Whether kernels and copies are only timed, not run (OPENREG_EXECUTE=timing; Note [Timing-only
//! execution] in sim/src/stream.cpp). Starts the runtime.
OPENREG_BACKEND_API bool timing_only_execution();

//! In timing-only execution, the largest copy from the host or collective (bytes) that still moves its
//! data (Note [Values in timing-only execution] in sim/src/stream.cpp).
OPENREG_BACKEND_API std::size_t timing_only_moved_bytes() noexcept;
//! The most bytes a kernel that does not say what it reads may touch and still run in timing-only
//! execution (sim::kTimingOnlyRunKernelBytes: compiled kernels, graph replays).
OPENREG_BACKEND_API std::size_t timing_only_run_kernel_bytes() noexcept;

//! The calling thread's virtual time, ns since the runtime started (0 without a profile).
OPENREG_BACKEND_API std::int64_t virtual_now_ns();

//! A device's virtual time so far (Note [Virtual time]); all zero without a profile.
struct VirtualDeviceTime {
  std::int64_t compute_busy_ns = 0;
  std::int64_t copy_busy_ns = 0;
  std::int64_t comm_busy_ns = 0;     //!< time a collective ran
  std::int64_t busy_ns = 0;          //!< time anything ran
  std::int64_t exposed_comm_ns = 0;  //!< time a collective ran with no kernel or copy beside it
  //! compute_busy_ns by op class, each instant once (Note [Where time goes] in sim/src/virtual_clock.cpp)
  std::int64_t matmul_ns = 0;
  std::int64_t attention_ns = 0;     //!< (see matmul_ns)
  std::int64_t optimizer_ns = 0;     //!< (see matmul_ns)
  std::int64_t memory_bound_ns = 0;  //!< (see matmul_ns)
  std::int64_t copy_alone_ns = 0;    //!< time a copy ran with no kernel beside it
  std::int64_t kernels = 0;
  double peak_ns = 0;  //!< the kernels' FLOPs at the profile's peak for their formats
  std::int64_t end_ns = 0;
  std::int64_t work_items = 0;  //!< kernels, copies and collectives placed so far
};
OPENREG_BACKEND_API VirtualDeviceTime virtual_device_time(c10::DeviceIndex index);

//! A collective's modelled time on the profile (Note [Collective cost model] in
//! sim/src/cost_model.cpp): `kind` is one of all_reduce, all_gather, reduce_scatter, broadcast, reduce,
//! all_to_all, send_recv; `bytes` its nccl-tests size; over `ranks` ranks on `nodes` nodes. nullopt
//! without a profile; c10::ValueError for an unknown kind or a bad count.
struct CollectiveEstimate {
  double ns = 0;
  std::string algorithm;
};
OPENREG_BACKEND_API std::optional<CollectiveEstimate> modelled_collective(const std::string& kind, double bytes,
                                                                          int ranks, int nodes);

}  // namespace c10::openreg
