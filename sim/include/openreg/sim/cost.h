#pragma once
// The cost model: what a kernel or a copy costs on a device profile, in device nanoseconds. Pure
// functions of the profile and the work's description; the virtual clock (Note [Virtual time] in
// sim/src/virtual_clock.cpp) places the results on a timeline. See Note [Cost model] in
// sim/src/cost_model.cpp for the formulas and why.

#include <cstddef>
#include <cstdint>

#include "openreg/sim/export.h"
#include "openreg/sim/profile.h"

namespace openreg::sim {

//! What a kernel does, as the op that launches it knows it (the backend computes it from the op's
//! shapes and dtypes at enqueue).
struct KernelCost {
  double flops = 0;  //!< math work, counted as torch.utils.flop_counter counts it (2 per multiply-add)
  double bytes = 0;  //!< device memory read plus written
  NumberFormat format = NumberFormat::kFp32;  //!< the format the math runs in (tf32 for allowed fp32 matmuls)
  bool matrix = false;  //!< runs on the matrix (tensor) units: matmuls, convolutions, attention
  //! A matrix op's output as a GEMM: rows (batch folded in) and columns, for its tiles; 0: unknown.
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

//! Where a copy goes, which picks its link.
enum class CopyRoute : std::uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice, kPeer };

//! Device time of a kernel, >= the profile's minimum kernel time.
OPENREG_SIM_API double kernel_time_ns(const DeviceProfile& profile, const KernelCost& cost) noexcept;
//! The fraction of the device's compute units a kernel occupies while it runs, in (0, 1].
OPENREG_SIM_API double kernel_occupancy(const DeviceProfile& profile, const KernelCost& cost) noexcept;
//! Device time of a copy of `bytes` over `route`; `pinned`: the host side is pinned memory.
OPENREG_SIM_API double copy_time_ns(const DeviceProfile& profile, CopyRoute route, std::size_t bytes,
                                    bool pinned) noexcept;
//! The peak FLOP/s a kernel of `cost` computes against: the matrix units' for its format when it is a
//! matrix op and they have the format, else the vector units' (fp32's when they lack the format).
OPENREG_SIM_API double peak_flops(const DeviceProfile& profile, const KernelCost& cost) noexcept;

}  // namespace openreg::sim
