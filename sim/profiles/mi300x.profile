# AMD Instinct MI300X (192 GB). One `key = value` per line; the comment after each value names its source.
# "assumption" marks a figure with no public measurement behind it: replace it when one is at hand.
name = mi300x                   # profile name (OPENREG_DEVICE_PROFILE=mi300x)
display_name = MI300X           # AMD's product name
sm_count = 304                  # AMD Instinct MI300X datasheet (304 compute units)
l2_mib = 32                     # AMD CDNA 3 whitepaper: 4 MB L2 per XCD, 8 XCDs (the 256 MB Infinity Cache is not modelled)
memory_gib = 192                # AMD Instinct MI300X datasheet (192 GB HBM3)
tensor_tflops.fp64 = 163.4      # AMD MI300X datasheet, FP64 matrix
tensor_tflops.tf32 = 653.7      # AMD MI300X datasheet, TF32 matrix, dense
tensor_tflops.bf16 = 1307.4     # AMD MI300X datasheet, BF16 matrix, dense
tensor_tflops.fp16 = 1307.4     # AMD MI300X datasheet, FP16 matrix, dense
tensor_tflops.fp8 = 2614.9      # AMD MI300X datasheet, FP8 matrix, dense
tensor_tflops.int8 = 2614.9     # AMD MI300X datasheet, INT8 matrix, dense (TOPS)
vector_tflops.fp64 = 81.7       # AMD MI300X datasheet, FP64 vector
vector_tflops.fp32 = 163.4      # AMD MI300X datasheet, FP32 vector
gemm_efficiency = 0.5112        # stas00/ml-engineering mamf-finder: best bf16 matmul 668.4 TFLOP/s = 51.1% of 1307.4
gemm_tile = 256                 # assumption: 256x256 output tiles (hipBLASLt's large-GEMM macro tiles)
memory_gbps = 5300              # AMD MI300X datasheet (5.3 TB/s)
memory_efficiency = 0.80        # assumption: no first-party copy measurement at hand
h2d_pinned_gbps = 55.6          # assumption: PCIe Gen5 x16 as H100's nvbandwidth figure
d2h_pinned_gbps = 55.6          # assumption: as host-to-device
h2d_pageable_gbps = 27.8        # assumption: half the pinned rate
d2h_pageable_gbps = 27.8        # assumption: half the pinned rate
host_link_latency_us = 2.0      # assumption: small copy latency over PCIe
peer_gbps = 64                  # AMD MI300X datasheet: Infinity Fabric links of 128 GB/s bidirectional, one link per peer
peer_latency_us = 2.0           # assumption: peer copy latency
copy_engines = 3                # model: host-to-device, device-to-host, and peer/device-local engines (1: all share one; 2: peer with device-to-host)
launch_us = 2.6                 # assumption: as CUDA's launch cost (gpu-anchors.md)
host_op_us = 4.0                # assumption: PyTorch eager's own work per op beside the launch
min_kernel_us = 2.0             # assumption: as CUDA's back-to-back kernel gap (gpu-anchors.md)
event_record_us = 2.3           # assumption: as the A100 measurement (simllm PR 109)
# Collectives (Note [Collective cost model] in sim/src/cost_model.cpp): RCCL's ring and tree; no switch
# reductions (no NVLS).
ranks_per_node = 8              # AMD Instinct MI300X platform: 8 GPUs per node, fully connected
ring_bus_gbps = 368             # assumption: 7 peer links x 64 GB/s x H100's ring bus / NVLink datasheet ratio (370/450)
ll_bus_gbps = 141               # assumption: as the H100 profile's
ll_latency_us = 5.0             # assumption: as the H100 profile's
simple_latency_us = 8.0         # assumption: as the H100 profile's
hop_latency_us = 0.6            # assumption: as the H100 profile's
network_gbps = 50               # AMD MI300X platform: 8 x 400 Gb/s NICs, one per GPU
network_ll_bus_gbps = 45        # assumption: as the H100 profile's
network_latency_us = 28         # assumption: as the H100 profile's
network_setup_us = 440          # assumption: as the H100 profile's
comm_compute_slowdown = 0.19    # arXiv 2507.03114: compute slows 18.9% on average (40% worst) beside communication
