#include "openreg/sim/cost.h"

#include <algorithm>
#include <cmath>

namespace openreg::sim {

// Note [Cost model]
// A kernel takes the longest of three times (a roofline with a floor):
//  - compute: flops / (peak x efficiency). A matrix op's peak is its format's on the matrix units,
//    times the profile's gemm_efficiency (what the best large GEMMs reach on the real chip, measured:
//    about 80% on an H100, not the datasheet peak), times its wave efficiency: the output is cut into
//    gemm_tile x gemm_tile tiles, one thread block each, and the blocks run in waves of sm_count, so
//    a GEMM of 133 tiles on 132 SMs takes two waves and reaches half the rate of one of 132 tiles.
//    This is what makes small GEMMs far less efficient than large ones (a 128 x 128 output uses one
//    SM of 132) and large ones whose tile count divides evenly reach the measured maximum. Other ops'
//    flops count against the vector units' peak.
//  - memory: bytes read and written / (memory bandwidth x memory_efficiency), the fraction copies and
//    memory-bound kernels reach (measured device-to-device copies: about 90%).
//  - the profile's minimum kernel time (a kernel of nothing still occupies the device that long).
// Not modelled: caches (an operand that fits in L2 is still read at HBM rate), clocks and thermals,
// and GEMM efficiency's dependence on K and on layout beyond what the tile waves capture.
// A kernel's occupancy (its share of the SMs while it runs, for two streams sharing the device: Note
// [Virtual time]) is its tiles' share of the SMs for a matrix op, and for any other op its bytes'
// share of one full wave (kBytesPerBlock per block, one block per SM).
// Copies: the host link at the profile's pinned or pageable rate plus its latency; peer copies on the
// peer link; a copy within a device reads and writes device memory, so it moves its bytes twice at the
// memory rate.

namespace {
// Bytes a memory-bound kernel's thread block moves (256 threads x 16 bytes): sizes its grid.
constexpr double kBytesPerBlock = 4096;
}  // namespace

double peak_flops(const DeviceProfile& profile, const KernelCost& cost) noexcept {
  const auto f = static_cast<int>(cost.format);
  if (cost.matrix && profile.tensor_flops[f] > 0) return profile.tensor_flops[f];
  if (profile.vector_flops[f] > 0) return profile.vector_flops[f];
  return profile.vector_flops[static_cast<int>(NumberFormat::kFp32)];
}

namespace {
// The output tiles (thread blocks) of a matrix op of known shape.
double gemm_tiles(const DeviceProfile& profile, const KernelCost& cost) {
  const double tile = profile.gemm_tile;
  return std::ceil(static_cast<double>(cost.rows) / tile) * std::ceil(static_cast<double>(cost.cols) / tile);
}

// tiles / (waves x SMs): how much of the last wave a GEMM's tiles fill, averaged over its waves.
double wave_efficiency(const DeviceProfile& profile, const KernelCost& cost) {
  if (cost.rows <= 0 || cost.cols <= 0) return 1.0;
  const double tiles = gemm_tiles(profile, cost);
  const double waves = std::ceil(tiles / profile.sm_count);
  return tiles / (waves * profile.sm_count);
}
}  // namespace

double kernel_time_ns(const DeviceProfile& profile, const KernelCost& cost) noexcept {
  double compute = 0;
  if (cost.flops > 0) {
    const bool on_matrix_units = cost.matrix && profile.tensor_flops[static_cast<int>(cost.format)] > 0;
    const double rate = peak_flops(profile, cost) * (on_matrix_units ? profile.gemm_efficiency * wave_efficiency(profile, cost) : 1.0);
    compute = cost.flops / rate * 1e9;
  }
  const double memory = cost.bytes / (profile.memory_bandwidth * profile.memory_efficiency) * 1e9;
  return std::max({profile.min_kernel_ns, compute, memory});
}

double kernel_occupancy(const DeviceProfile& profile, const KernelCost& cost) noexcept {
  double blocks = 0;
  if (cost.matrix && cost.rows > 0 && cost.cols > 0) {
    blocks = gemm_tiles(profile, cost);
  } else if (cost.matrix) {
    blocks = profile.sm_count;  // a matrix op of unknown shape: assume it fills the device
  } else {
    blocks = std::ceil(cost.bytes / kBytesPerBlock);
  }
  return std::clamp(blocks / profile.sm_count, 1.0 / profile.sm_count, 1.0);
}

double copy_time_ns(const DeviceProfile& profile, CopyRoute route, std::size_t bytes, bool pinned) noexcept {
  const auto b = static_cast<double>(bytes);
  switch (route) {
    case CopyRoute::kHostToDevice:
      return profile.host_link_latency_ns + b / (pinned ? profile.h2d_pinned : profile.h2d_pageable) * 1e9;
    case CopyRoute::kDeviceToHost:
      return profile.host_link_latency_ns + b / (pinned ? profile.d2h_pinned : profile.d2h_pageable) * 1e9;
    case CopyRoute::kPeer:
      return profile.peer_latency_ns + b / profile.peer_bandwidth * 1e9;
    case CopyRoute::kDeviceToDevice:
      return std::max(profile.min_kernel_ns, 2 * b / (profile.memory_bandwidth * profile.memory_efficiency) * 1e9);
  }
  return 0;
}

}  // namespace openreg::sim
