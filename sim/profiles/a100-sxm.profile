# NVIDIA A100 SXM4 80GB. One `key = value` per line; the comment after each value names its source.
# "assumption" marks a figure with no public measurement behind it: replace it when one is at hand.
name = a100-sxm                 # profile name (OPENREG_DEVICE_PROFILE=a100-sxm)
display_name = A100 SXM         # NVIDIA's product name
sm_count = 108                  # NVIDIA A100 Tensor Core GPU architecture whitepaper (108 SMs)
l2_mib = 40                     # NVIDIA A100 whitepaper (40 MB L2)
memory_gib = 80                 # NVIDIA A100 80GB datasheet
tensor_tflops.fp64 = 19.5       # NVIDIA A100 datasheet, FP64 Tensor Core
tensor_tflops.tf32 = 156        # NVIDIA A100 datasheet, TF32 Tensor Core, dense
tensor_tflops.bf16 = 312        # NVIDIA A100 datasheet, BF16 Tensor Core, dense
tensor_tflops.fp16 = 312        # NVIDIA A100 datasheet, FP16 Tensor Core, dense
tensor_tflops.int8 = 624        # NVIDIA A100 datasheet, INT8 Tensor Core, dense (TOPS)
vector_tflops.fp64 = 9.7        # NVIDIA A100 datasheet, FP64
vector_tflops.fp32 = 19.5       # NVIDIA A100 datasheet, FP32
vector_tflops.bf16 = 39         # NVIDIA A100 whitepaper, peak BF16 non-tensor
vector_tflops.fp16 = 78         # NVIDIA A100 whitepaper, peak FP16 non-tensor
gemm_efficiency = 0.869         # stas00/ml-engineering mamf-finder: best bf16 matmul 271.2 TFLOP/s = 86.9% of 312
attention_forward_efficiency = 0.638   # FlashAttention-2 forward on A100 (SM80), 32 heads x 4096 keys: 185.6 TFLOP/s (liangan1/GPU_travel, performance/flash-attn), over keys/(keys + attention_half_keys)
attention_backward_efficiency = 0.609  # assumption: the forward's x H100's measured backward/forward ratio (0.333/0.349)
attention_half_keys = 300       # assumption: as H100's fit (FlashAttention-2's tiles are the same size on both)
gemm_tile = 128                 # assumption: 128x128 output tiles
memory_gbps = 2039              # NVIDIA A100 80GB SXM datasheet (2,039 GB/s)
memory_efficiency = 0.892       # openfabric-systems/simllm PR 109: A100 memory copy 1818 GB/s = 89% of nameplate
h2d_pinned_gbps = 25            # NVIDIA nvbandwidth issues: A100 host-to-device ~25 GB/s (PCIe Gen4 x16)
d2h_pinned_gbps = 25            # assumption: as host-to-device
h2d_pageable_gbps = 12.5        # assumption: half the pinned rate
d2h_pageable_gbps = 12.5        # assumption: half the pinned rate
host_link_latency_us = 2.0      # assumption: small cudaMemcpyAsync latency over PCIe
peer_gbps = 252                 # assumption: NVLink3's 300 GB/s per direction (datasheet) x H100's measured/datasheet ratio (378/450)
peer_latency_us = 2.0           # assumption: NVLink peer copy latency
copy_engines = 3                # model: host-to-device, device-to-host, and peer/device-local engines (1: all share one; 2: peer with device-to-host)
launch_us = 2.6                 # kernel launch host cost, 2.6-5 us measured (gpu-anchors.md); low end
host_op_us = 4.0                # assumption: PyTorch eager's own work per op beside the launch
min_kernel_us = 2.0             # back-to-back kernel gap on the device, ~1-2 us (gpu-anchors.md); high end
event_record_us = 2.3           # simllm PR 109: event record between kernels ~2.3 us of device time on A100
# Collectives (Note [Collective cost model] in sim/src/cost_model.cpp)
ranks_per_node = 8              # NVIDIA DGX/HGX A100: 8 GPUs per node
ring_bus_gbps = 247             # assumption: peer_gbps x H100's ring bus / peer copy ratio (370/378)
ll_bus_gbps = 87.7              # NCCL's tuning model, LL protocol's maximum on Ampere within a node (torch/_inductor/comm_analysis.py)
ll_latency_us = 5.0             # assumption: as on H100 (NCCL's tuning model gives both generations the same base latencies)
simple_latency_us = 8.0         # assumption: as on H100
hop_latency_us = 0.6            # NCCL's tuning model: NVLink LL step latency (torch/_inductor/comm_analysis.py)
network_gbps = 25               # NVIDIA DGX A100: 8 x 200 Gb/s HDR InfiniBand, one per GPU
network_ll_bus_gbps = 22.5      # NCCL's tuning model, LL protocol's maximum on Ampere across 2 nodes
network_latency_us = 28         # assumption: as the H100 profile's (fit to EFA; InfiniBand is lower)
network_setup_us = 440          # assumption: as the H100 profile's
comm_compute_slowdown = 0.19    # arXiv 2507.03114: compute slows 18.9% on average (40% worst) beside communication
