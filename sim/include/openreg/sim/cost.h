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

//! What kind of work a kernel is, for the breakdown of a device's time by op class (Note [Where time
//! goes] in sim/src/virtual_clock.cpp). Decided with the cost, by the op that launches the kernel.
enum class KernelClass : std::uint8_t {
  kByUnits = 0,  //!< not said: matmul when the cost is `matrix`, else memory-bound (kernel_class())
  kMatmul,       //!< GEMMs and convolutions, costed by their FLOPs on the matrix units
  kAttention,    //!< scaled dot product attention's kernels (flash, efficient, fused), forward and backward
  kMemoryBound,  //!< every other kernel: elementwise, reductions, norms, copies made as kernels
  kOptimizer,    //!< an optimizer step's kernels: foreach ops and fused optimizers (Adam, AdamW, SGD, Adagrad)
};

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
  KernelClass kind = KernelClass::kByUnits;  //!< its op class, for where a device's time goes
  //! An attention kernel's (kind kAttention) direction and keys per query (its score matrix's width),
  //! for the profile's attention efficiency (Note [Cost model]); `flops` are what the kernel executes,
  //! a causal mask's skipped blocks excluded.
  bool backward = false;
  std::int64_t keys = 0;
};

//! The op class a kernel of `cost` counts in: its `kind`, or, when the op did not say, matmul for a
//! matrix op and memory-bound for any other.
OPENREG_SIM_API KernelClass kernel_class(const KernelCost& cost) noexcept;

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

//! A collective as NCCL sizes it (nccl-tests' "size"), for its modelled time.
enum class CollectiveKind : std::uint8_t { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAllToAll, kSendRecv };
struct CollectiveShape {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  //! all_reduce, broadcast, reduce: the buffer; all_gather: the gathered output; reduce_scatter: the
  //! input being scattered; all_to_all: one rank's send buffer; send/recv: the message.
  double bytes = 0;
  int ranks = 1;  //!< ranks taking part (2 for send/recv)
  int nodes = 1;  //!< nodes they span (ranks spread evenly over them)
};
//! A collective's modelled time and the algorithm (and protocol) the model chose for it: "ring/LL",
//! "ring", "nvls", "tree/LL", "tree", "p2p", "local".
struct CollectiveTime {
  double ns = 0;
  const char* algorithm = "";
};
//! Device time of a collective on a group of ranks of `profile`'s GPUs (Note [Collective cost model]).
OPENREG_SIM_API CollectiveTime collective_time(const DeviceProfile& profile, const CollectiveShape& shape) noexcept;
//! nccl-tests' bus bandwidth factor of `kind` over `ranks` (busbw = bytes / time x factor).
OPENREG_SIM_API double bus_factor(CollectiveKind kind, int ranks) noexcept;

}  // namespace openreg::sim
