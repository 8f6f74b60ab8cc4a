#include "openreg/sim/cost.h"

#include <algorithm>
#include <cmath>
#include <limits>

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
//    Attention's fused kernels (flash, efficient) are not GEMMs: each thread block streams the keys
//    past one tile of queries, with a softmax between its two matmuls, and they reach a smaller
//    fraction of the matrix peak than a GEMM, smaller again in the backward (which recomputes the
//    scores: it executes 2.5 times the forward's FLOPs, the FlashAttention papers' count). Where the
//    profile gives them, an attention kernel runs at the peak times its direction's efficiency times
//    keys / (keys + attention_half_keys): each query tile pays a fixed cost (loading it, rescaling and
//    writing its output) worth attention_half_keys keys of work, so short sequences reach less (the
//    measured curves: about 60% of the long-sequence rate at 512 keys, 90% at 2048). A causal mask's
//    skipped blocks are not executed, so they are not in the kernel's FLOPs.
// Not modelled: caches (an operand that fits in L2 is still read at HBM rate), clocks and thermals
// as they change (a profile is of one power limit: a part run at a lower limit is a profile of its
// own, and the clock a long load sustains belongs in its measured efficiencies; the H100 profiles'
// GEMM efficiency is such a sustained figure, the others are short bursts for want of one), and GEMM
// efficiency's dependence on K and on layout beyond what the tile waves capture.
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

// The fraction of the matrix peak an attention kernel reaches (Note [Cost model]); 0: the profile does
// not say, and the kernel is costed as a GEMM.
double attention_efficiency(const DeviceProfile& profile, const KernelCost& cost) {
  if (kernel_class(cost) != KernelClass::kAttention || profile.attention_forward_efficiency <= 0) return 0;
  const double plateau = cost.backward && profile.attention_backward_efficiency > 0
                             ? profile.attention_backward_efficiency
                             : profile.attention_forward_efficiency;
  if (cost.keys <= 0 || profile.attention_half_keys <= 0) return plateau;
  const auto keys = static_cast<double>(cost.keys);
  return plateau * keys / (keys + profile.attention_half_keys);
}

double kernel_time_ns(const DeviceProfile& profile, const KernelCost& cost) noexcept {
  double compute = 0;
  if (cost.flops > 0) {
    double efficiency = 1.0;  // the vector units: their peak
    if (cost.matrix && profile.tensor_flops[static_cast<int>(cost.format)] > 0) {
      const double attention = attention_efficiency(profile, cost);
      efficiency = attention > 0 ? attention : profile.gemm_efficiency * wave_efficiency(profile, cost);
    }
    compute = cost.flops / (peak_flops(profile, cost) * efficiency) * 1e9;
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

// Note [Collective cost model]
// A collective's time is what NCCL's own choice would take: each algorithm and protocol that could run
// it is timed as latency + bytes on the busiest link / that link's rate, and the fastest wins, as
// NCCL's tuner picks by its own estimates. Sizes are nccl-tests' (CollectiveShape::bytes) and rates are
// its bus bandwidths, so a profile's figures are read straight off published nccl-tests results: the
// bytes each rank moves are bytes x bus_factor (2(n-1)/n for all_reduce, (n-1)/n for all_gather,
// reduce_scatter and all_to_all, 1 for the rooted ones and send/recv).
// Within a node (nodes == 1):
//  - ring, LL protocol: ll_latency + steps x hop_latency + moved / ll_bus (low latency, low rate: the
//    small-message choice);
//  - ring, Simple protocol: simple_latency + steps x hop_latency + moved / ring_bus;
//  - NVLS (all_reduce, all_gather, reduce_scatter, where the profile has it): the switch reduces, so
//    no ring steps: nvls_latency + moved / nvls_bus.
//  - send/recv: the peer link (peer_latency + bytes / peer_bandwidth), as a peer copy.
// Across nodes (g = ranks / nodes per node, N = nodes), each GPU has its own NIC (network_bandwidth):
//  - tree, LL protocol (the small-message choice): ll_latency + 2 log2(N) x network_latency + the node's
//    ring steps + moved / network_ll_bus;
//  - all_reduce, tree (NCCL's NVLS-tree / tree, Simple protocol): the node's GPUs reduce within it
//    (and broadcast the result back) at the node's best rate, and the nodes reduce and broadcast along
//    NCCL's double binary tree, over the node's g NICs; the stages pipeline, so the slower one sets the
//    rate: network_setup + node steps + max(2(g-1)/g x bytes / best node rate, k x bytes / (g x
//    network_bandwidth)). k is what a node's NICs carry each way per byte reduced. Each of the two
//    trees reduces half the bytes; a node is an inner node of one (it takes two children's halves and
//    passes one up, then takes one down and passes two: 1.5 x bytes each way) and a leaf of the other
//    (0.5 x bytes), so k = 2; with 2 nodes each is the other's only peer and k = 1. That is why nccl-tests' two-node all_reduce reads up to
//    ~470-490 GB/s bus bandwidth on 8 x 400 Gb/s nodes and four nodes or more read at most the NICs'
//    ~400 (NVIDIA/nccl-tests #309: "2 nodes tend to be an aberration (it's an ideal case for the TREE
//    protocol)"; "with 8 400 Gbps NICs your peak would be at 400 GB/s");
//  - ring over all ranks, striped over the node's g NICs (every kind; all_reduce's other choice):
//    network_setup + node steps + moved / min(ring_bus, g x network_bandwidth) (all_to_all: the (n-g)/n
//    that leaves the node over its NIC);
//  - send/recv: network_latency + bytes / network_bandwidth.
// network_setup and network_latency are fitted to a published two-node curve (the profile says so).
// Not modelled: link contention between groups (two collectives at once each get the full rate),
// NCCL's channel counts, and message sizes that are not a multiple of its chunk size.
// While a collective runs, the kernels of its device that overlap it take comm_compute_slowdown longer
// (Note [Virtual time]).

namespace {
int steps(CollectiveKind kind, int ranks) noexcept {
  if (ranks <= 1) return 0;
  return kind == CollectiveKind::kAllReduce ? 2 * (ranks - 1) : kind == CollectiveKind::kSendRecv ? 1 : ranks - 1;
}
}  // namespace

double bus_factor(CollectiveKind kind, int ranks) noexcept {
  const double n = std::max(1, ranks);
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2 * (n - 1) / n;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll: return (n - 1) / n;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce:
    case CollectiveKind::kSendRecv: return 1;
  }
  return 1;
}

CollectiveTime collective_time(const DeviceProfile& p, const CollectiveShape& shape) noexcept {
  const int n = std::max(1, shape.ranks);
  const int nodes = std::clamp(shape.nodes, 1, n);
  const double bytes = std::max(0.0, shape.bytes);
  const CollectiveKind kind = shape.kind;
  if (n == 1) return {p.min_kernel_ns, "local"};  // a one-rank group: a local copy at most
  const double moved = bytes * bus_factor(kind, n);
  CollectiveTime best{std::numeric_limits<double>::infinity(), ""};
  auto consider = [&best](double ns, const char* algorithm) {
    if (ns < best.ns) best = {ns, algorithm};
  };
  const bool nvls_kind = kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kAllGather ||
                         kind == CollectiveKind::kReduceScatter;
  if (nodes == 1) {
    if (kind == CollectiveKind::kSendRecv) return {p.peer_latency_ns + bytes / p.peer_bandwidth * 1e9, "p2p"};
    const double ring_steps = steps(kind, n) * p.hop_latency_ns;
    consider(p.ll_latency_ns + ring_steps + moved / p.ll_bus_bandwidth * 1e9, "ring/LL");
    consider(p.simple_latency_ns + ring_steps + moved / p.ring_bus_bandwidth * 1e9, "ring");
    if (nvls_kind && p.nvls_bus_bandwidth > 0) consider(p.nvls_latency_ns + moved / p.nvls_bus_bandwidth * 1e9, "nvls");
    return best;
  }
  if (kind == CollectiveKind::kSendRecv) return {p.network_latency_ns + bytes / p.network_bandwidth * 1e9, "p2p"};
  const int g = (n + nodes - 1) / nodes;  // ranks per node
  const double node_steps = steps(kind, g) * p.hop_latency_ns;
  const double tree_depth = std::ceil(std::log2(static_cast<double>(nodes)));
  consider(p.ll_latency_ns + 2 * tree_depth * p.network_latency_ns + node_steps + moved / p.network_ll_bus_bandwidth * 1e9,
           "tree/LL");
  const double nics = g * p.network_bandwidth;
  if (kind == CollectiveKind::kAllToAll) {
    const double within = bytes * (g - 1) / n / p.ring_bus_bandwidth;
    const double across = bytes * (n - g) / n / p.network_bandwidth;
    consider(p.network_setup_ns + std::max(within, across) * 1e9, "ring");
    return best;
  }
  if (kind == CollectiveKind::kAllReduce) {
    const double node_rate = std::max(p.ring_bus_bandwidth, p.nvls_bus_bandwidth);
    const double within = 2.0 * (g - 1) / g * bytes / node_rate;
    const double across = (nodes == 2 ? 1.0 : 2.0) * bytes / nics;
    consider(p.network_setup_ns + node_steps + std::max(within, across) * 1e9, "tree");
  }
  consider(p.network_setup_ns + node_steps + moved / std::min(p.ring_bus_bandwidth, nics) * 1e9, "ring");
  return best;
}

KernelClass kernel_class(const KernelCost& cost) noexcept {
  if (cost.kind != KernelClass::kByUnits) return cost.kind;
  return cost.matrix ? KernelClass::kMatmul : KernelClass::kMemoryBound;
}

}  // namespace openreg::sim
