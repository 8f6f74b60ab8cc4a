# NVIDIA H100 SXM5 80GB. One `key = value` per line; the comment after each value names its source.
# "assumption" marks a figure with no public measurement behind it: replace it when one is at hand.
# Figures and sources are collected in the project's shared notes (gpu-anchors.md).
name = h100-sxm                 # profile name (OPENREG_DEVICE_PROFILE=h100-sxm)
display_name = H100 SXM         # NVIDIA's product name
sm_count = 132                  # NVIDIA H100 Tensor Core GPU whitepaper (SXM5: 132 SMs)
l2_mib = 50                     # NVIDIA H100 whitepaper (50 MB L2)
memory_gib = 80                 # NVIDIA H100 datasheet (80 GB HBM3)
tensor_tflops.fp64 = 66.9       # NVIDIA H100 datasheet, FP64 Tensor Core
tensor_tflops.tf32 = 494.7      # NVIDIA H100 datasheet, TF32 Tensor Core, dense (half the sparse figure)
tensor_tflops.bf16 = 989.4      # NVIDIA H100 datasheet, BF16 Tensor Core, dense
tensor_tflops.fp16 = 989.4      # NVIDIA H100 datasheet, FP16 Tensor Core, dense
tensor_tflops.fp8 = 1978.9      # NVIDIA H100 datasheet, FP8 Tensor Core, dense
tensor_tflops.int8 = 1978.9     # NVIDIA H100 datasheet, INT8 Tensor Core, dense (TOPS)
vector_tflops.fp64 = 33.5       # NVIDIA H100 datasheet, FP64
vector_tflops.fp32 = 66.9       # NVIDIA H100 datasheet, FP32
vector_tflops.bf16 = 133.8      # NVIDIA H100 whitepaper, peak BF16 non-tensor
vector_tflops.fp16 = 133.8      # NVIDIA H100 whitepaper, peak FP16 non-tensor
gemm_efficiency = 0.803         # stas00/ml-engineering mamf-finder: best bf16 matmul 794.5 TFLOP/s = 80.3% of 989.4
gemm_tile = 128                 # assumption: 128x128 output tiles (cuBLAS/CUTLASS Hopper GEMMs' common tile)
memory_gbps = 3350              # NVIDIA H100 datasheet (3.35 TB/s HBM3)
memory_efficiency = 0.896       # PyTorch device-to-device copy on an H100, ~3.0 TB/s counting read + write (2026-11)
h2d_pinned_gbps = 55.6          # NVIDIA nvbandwidth, host-to-device copy engine, pinned (55.6-57.1 GB/s)
d2h_pinned_gbps = 55.6          # assumption: as host-to-device (nvbandwidth reports both within a few %)
h2d_pageable_gbps = 27.8        # assumption: half the pinned rate (staged through a pinned bounce buffer)
d2h_pageable_gbps = 27.8        # assumption: half the pinned rate
host_link_latency_us = 2.0      # assumption: small cudaMemcpyAsync latency over PCIe
peer_gbps = 378                 # NVIDIA/nccl issue 1264, p2pBandwidthLatencyTest on H100 SXM: 376-380 GB/s one way
peer_latency_us = 2.0           # assumption: NVLink peer copy latency, p2pBandwidthLatencyTest order of magnitude
copy_engines = 3                # model: host-to-device, device-to-host, and peer/device-local engines (1: all share one; 2: peer with device-to-host)
launch_us = 2.6                 # kernel launch host cost, 2.6-5 us measured (gpu-anchors.md); low end
host_op_us = 4.0                # assumption: PyTorch eager's own work per op beside the launch (OPENREG_HOST_TIME=measured measures it)
min_kernel_us = 2.0             # back-to-back kernel gap on the device, ~1-2 us (gpu-anchors.md); high end
event_record_us = 2.3           # simllm PR 109: event record between kernels ~2.3 us of device time (measured on A100)
