#pragma once
// Virtual time's public types (Note [Virtual time] in sim/src/virtual_clock.cpp): with a device profile
// (Config::device_profile, OPENREG_DEVICE_PROFILE) every time openreg reports is the modelled GPU's.

#include <cstdint>

namespace openreg::sim {

//! OPENREG_HOST_TIME: how a host thread's virtual clock advances between the items it issues.
enum class HostTimeMode : int {
  kModelled = 0,  //!< "modelled" (default): the profile's fixed cost per issued op; exactly reproducible
  kMeasured = 1,  //!< "measured": the thread's CPU time between calls
};

//! A device's virtual time accumulated since its runtime started (ns of the modelled GPU).
struct DeviceTimeStats {
  std::int64_t compute_busy_ns = 0;  //!< time some kernel ran (union of kernel intervals)
  std::int64_t copy_busy_ns = 0;     //!< time some copy ran (union of copy intervals)
  std::int64_t comm_busy_ns = 0;     //!< time some collective ran (union of collective intervals)
  std::int64_t busy_ns = 0;          //!< time anything ran (union of all three)
  std::int64_t exposed_comm_ns = 0;  //!< time a collective ran with no kernel or copy beside it
  //! compute_busy_ns by the op class of the kernels that ran (Note [Where time goes] in
  //! sim/src/virtual_clock.cpp): time when kernels of several classes ran counts once, for the first of
  //! matmul, attention, optimizer, memory-bound; the four sum to compute_busy_ns.
  std::int64_t matmul_ns = 0;
  std::int64_t attention_ns = 0;        //!< (see matmul_ns)
  std::int64_t optimizer_ns = 0;        //!< (see matmul_ns)
  std::int64_t memory_bound_ns = 0;     //!< (see matmul_ns)
  std::int64_t copy_alone_ns = 0;       //!< time a copy ran with no kernel beside it
  std::int64_t kernels = 0;          //!< kernels placed
  double peak_ns = 0;                //!< the kernels' flops at the profile's peak for their formats (MFU's numerator)
  std::int64_t end_ns = 0;           //!< virtual end of the last work issued (ns since the runtime started)
  //! kernels, copies and collectives placed: the program's work on the device, counted whatever its
  //! span (a copy hidden behind another adds no busy time), so a change tells that the device was used
  std::int64_t work_items = 0;
};

}  // namespace openreg::sim
