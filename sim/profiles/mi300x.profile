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
