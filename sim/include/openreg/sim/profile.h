#pragma once
// DeviceProfile: the figures of a real GPU that the virtual clock turns work into time with
// (Note [Virtual time] in sim/src/virtual_clock.cpp). A profile is a data file, one `key = value` per
// line, each value followed by a `#` comment naming its public source; the shipped ones live in
// sim/profiles/ and are built into the library, so a name such as "h100-sxm" needs no path. Any other
// value of OPENREG_DEVICE_PROFILE is read as the path of such a file.
//
// Thread-safety: a loaded profile is immutable and shared (std::shared_ptr<const DeviceProfile>).

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "openreg/sim/export.h"

namespace openreg::sim {

//! The number formats a kernel computes in, for the profile's per-format peaks.
enum class NumberFormat : std::uint8_t { kFp64, kFp32, kTf32, kBf16, kFp16, kFp8, kInt8 };
inline constexpr int kNumberFormats = 7;
//! "fp64", "fp32", ... (the keys' suffixes in profile files).
OPENREG_SIM_API const char* number_format_name(NumberFormat format) noexcept;

struct OPENREG_SIM_API DeviceProfile {
  std::string name;          //!< the file's `name`, e.g. "h100-sxm"
  std::string display_name;  //!< e.g. "H100 SXM"
  int sm_count = 0;          //!< streaming multiprocessors (compute units on AMD)
  std::uint64_t l2_bytes = 0;
  std::uint64_t memory_bytes = 0;
  //! Dense peak FLOP/s of the matrix (tensor) units and of the vector units per format; 0: the unit
  //! lacks the format.
  std::array<double, kNumberFormats> tensor_flops{};
  std::array<double, kNumberFormats> vector_flops{};
  //! Fraction of the tensor peak that the best large GEMMs reach on the real chip (measured, not the
  //! datasheet's peak).
  double gemm_efficiency = 0;
  int gemm_tile = 128;              //!< output tile edge of the GEMM kernels (wave quantization)
  //! Fraction of the tensor peak that the fused attention kernels (PyTorch's scaled dot product
  //! attention) reach at long sequences, forward and backward; 0: not given (attention is costed as a
  //! GEMM). They reach half of it at `attention_half_keys` keys per query (a fixed cost per query tile).
  double attention_forward_efficiency = 0;
  double attention_backward_efficiency = 0;
  double attention_half_keys = 0;
  double memory_bandwidth = 0;      //!< bytes/s, datasheet
  double memory_efficiency = 0;     //!< fraction of it that copies and memory-bound kernels reach
  double h2d_pinned = 0;            //!< bytes/s over the host link, pinned host memory
  double d2h_pinned = 0;
  double h2d_pageable = 0;          //!< bytes/s from pageable host memory (staged, synchronous on CUDA)
  double d2h_pageable = 0;
  double host_link_latency_ns = 0;  //!< per host-link copy
  double peer_bandwidth = 0;        //!< bytes/s one way between two devices
  double peer_latency_ns = 0;
  int copy_engines = 0;
  double launch_ns = 0;        //!< host time to issue one item (the driver's launch call)
  double host_op_ns = 0;       //!< host time of the framework's own work per op (modelled host time)
  double min_kernel_ns = 0;    //!< the shortest a kernel takes on the device
  double event_record_ns = 0;  //!< device time an event record takes

  // Collectives: NCCL's (RCCL's) algorithms over this chip's links (Note [Collective cost model] in
  // sim/src/cost_model.cpp). Bus bandwidths are nccl-tests' "busbw" (algorithm-independent).
  int ranks_per_node = 0;               //!< GPUs per node: how ranks fall into nodes by default
  double ring_bus_bandwidth = 0;        //!< bytes/s, ring algorithm, Simple protocol, within a node
  double ll_bus_bandwidth = 0;          //!< bytes/s, low-latency (LL) protocol, within a node
  double nvls_bus_bandwidth = 0;        //!< bytes/s, NVLink SHARP (switch reductions); 0: none
  double ll_latency_ns = 0;             //!< fixed cost of an LL-protocol collective
  double simple_latency_ns = 0;         //!< fixed cost of a Simple-protocol collective
  double nvls_latency_ns = 0;           //!< fixed cost of an NVLS collective
  double hop_latency_ns = 0;            //!< per ring or tree step within a node
  double network_bandwidth = 0;         //!< bytes/s one way per GPU between nodes (its NIC)
  double network_ll_bus_bandwidth = 0;  //!< bytes/s bus, LL protocol across nodes
  double network_latency_ns = 0;        //!< per step between nodes
  double network_setup_ns = 0;          //!< fixed cost of a Simple-protocol collective across nodes
  //! Fraction by which a kernel slows while a collective runs beside it on its device (NCCL's kernels
  //! take SMs and memory bandwidth); 0: no slowdown.
  double comm_compute_slowdown = 0;
};

//! The shipped profiles' names ("a100-sxm", "h100-sxm", "mi300x").
OPENREG_SIM_API std::vector<std::string> shipped_profile_names();

//! A shipped profile by name, or a profile file by path. Throws ConfigError naming `variable`, the
//! value and, for a malformed file, the line and field (an unknown name lists the shipped ones).
OPENREG_SIM_API std::shared_ptr<const DeviceProfile> load_device_profile(std::string_view name_or_path,
                                                                         std::string_view variable);

//! Parses profile text (the file format above); `origin` names it in errors. Throws ConfigError.
OPENREG_SIM_API std::shared_ptr<const DeviceProfile> parse_device_profile(std::string_view text,
                                                                          std::string_view origin,
                                                                          std::string_view variable);

}  // namespace openreg::sim
