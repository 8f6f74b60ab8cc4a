# NVIDIA H100 SXM5 96GB (HBM2e) at its 500 W power limit: the H100 of Meta's Grand Teton hosts, on which
# torchtitan's H100 performance reports were measured (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md:
# "96GB HBM2e with 2.4 TB/sec", "the default 500W power limit"). The same GH100 chip as h100-sxm, at lower
# clocks; every figure not named below is h100-sxm's, with its source. Its peaks are h100-sxm's scaled by
# 0.896: the report says the part's peak lies "between SXM and NVL", and the datasheets give bf16 989.4
# TFLOP/s at 700 W (SXM) and 835.5 at 400 W (H100 NVL, same 132 SMs); at 500 W, linear in the power
# limit, 886.8 (an assumption until a measurement of the part is at hand). The measured efficiencies
# (GEMM, attention, copies) are h100-sxm's: fractions of the peak, taken to hold at the lower clock.
# "assumption" marks a figure with no public measurement behind it: replace it when one is at hand.
# Figures and sources are collected in the project's shared notes (gpu-anchors.md).
name = h100-sxm-500w            # profile name (OPENREG_DEVICE_PROFILE=h100-sxm-500w)
display_name = H100 SXM 96GB 500W  # NVIDIA H100 SXM5 96GB at a 500 W power limit
sm_count = 132                  # NVIDIA H100 Tensor Core GPU whitepaper (SXM5: 132 SMs)
l2_mib = 50                     # NVIDIA H100 whitepaper (50 MB L2)
memory_gib = 96                 # torchtitan's report above: 96GB HBM2e
tensor_tflops.fp64 = 60.0      # assumption: h100-sxm's x 0.896 (the header's power-limit interpolation)
tensor_tflops.tf32 = 443.4     # assumption: h100-sxm's x 0.896 (the header's power-limit interpolation)
tensor_tflops.bf16 = 886.8     # assumption: h100-sxm's x 0.896 (the header's power-limit interpolation)
tensor_tflops.fp16 = 886.8     # assumption: h100-sxm's x 0.896 (the header's power-limit interpolation)
tensor_tflops.fp8 = 1773.7     # assumption: h100-sxm's x 0.896 (the header's power-limit interpolation)
tensor_tflops.int8 = 1773.7    # assumption: h100-sxm's x 0.896 (the header's power-limit interpolation)
vector_tflops.fp64 = 30.0      # assumption: h100-sxm's x 0.896 (the header's power-limit interpolation)
vector_tflops.fp32 = 60.0      # assumption: h100-sxm's x 0.896 (the header's power-limit interpolation)
vector_tflops.bf16 = 119.9     # assumption: h100-sxm's x 0.896 (the header's power-limit interpolation)
vector_tflops.fp16 = 119.9     # assumption: h100-sxm's x 0.896 (the header's power-limit interpolation)
gemm_efficiency = 0.740         # h100-sxm's: mamf-finder's burst 0.803 x the sustained/burst 0.921 under the power cap (TileOPs PR 1980, H200 at 700 W; at 500 W the cap binds harder, so this is a lower bound of the loss)
# PyTorch's SDPA flash kernel (its vendored FlashAttention-2, what torchtitan's programs run) against the
# curves below on h100-sxm's peak (measured on 700 W SXM parts), head dim 128: its Dec 2024 build 329.5 TFLOP/s
# forward, non-causal, 4608 keys (meta-pytorch/tritonbench PR 97; the curve: 324); its Jun 2024 build 288-298
# forward, non-causal, 1k-8k keys at batch 128 (pytorch/benchmark PR 2296; the curve: 267-333), and causal at
# batch 1 x 16 heads x 4096 keys, a quarter of the curves' batch (under 4 waves of blocks), 205.6 forward and
# 178.5 backward (pytorch/pytorch PR 128888; the curve: 322, 307). No measurement of its backward at a
# training shape was found: the curves stay.
attention_forward_efficiency = 0.349   # FlashAttention-2 on H100 SXM5, head dim 128, causal forward: 333 TFLOP/s at 8k keys, 298 at 2k (Shah et al. 2024, FlashAttention-3 paper, Fig. 5), over keys/(keys + attention_half_keys)
attention_backward_efficiency = 0.333  # same paper, Fig. 6: FlashAttention-2 backward, head dim 128: 318 TFLOP/s at 8k keys, 291 at 2k
attention_half_keys = 300       # fit: both FlashAttention-2 curves above (512 to 16k keys) within 3%, 14% at 512 forward
gemm_tile = 128                 # assumption: 128x128 output tiles (cuBLAS/CUTLASS Hopper GEMMs' common tile)
memory_gbps = 2400              # torchtitan's report above: 2.4 TB/sec peak memory bandwidth
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
# Collectives (Note [Collective cost model] in sim/src/cost_model.cpp). "fit" marks a figure chosen so
# that the model meets a published curve (bench/sweeps/collective_bench.py prints the comparison).
ranks_per_node = 8              # NVIDIA HGX H100: 8 GPUs per node
ring_bus_gbps = 370             # nccl-tests issues 212 and 309: 8xH100 all_reduce with NVLS off, ~370 GB/s bus bandwidth
ll_bus_gbps = 141               # NCCL's tuning model, LL protocol's maximum on Hopper within a node (torch/_inductor/comm_analysis.py)
nvls_bus_gbps = 480             # nccl-tests issue 212 (NCCL maintainer): 8xH100 all_reduce NVLS ~480 GB/s bus bandwidth at >= 1 GiB
ll_latency_us = 5.0             # fit: small 8-rank all_reduce 6-25 us (NVIDIA/nccl issues 1259, 1940) with 14 ring steps
simple_latency_us = 8.0         # assumption: NCCL's Simple protocol's base latency order (its tuning model's 6.6-8.4 us)
nvls_latency_us = 18.0          # fit: NCCL picks NVLS from about 2 MB up, ring below 1 MB (nccl-tests issue 309)
hop_latency_us = 0.6            # NCCL's tuning model: NVLink LL step latency (torch/_inductor/comm_analysis.py)
network_gbps = 47               # 400 Gb/s per GPU (ConnectX-7 NDR InfiniBand, or EFA 3.2 Tb/s per 8-GPU node), as NCCL moves it: 46-48 GB/s per NDR NIC (NVIDIA maintainer, nccl-tests issues 290 and 319), the middle
network_ll_bus_gbps = 45        # NCCL's tuning model, LL protocol's maximum on Hopper across 2 nodes
network_latency_us = 28         # fit: 2x8 H100 over EFA, tiny all_reduce 65-75 us (AWS awsome-distributed-training)
network_setup_us = 440          # fit: 2x8 H100 over EFA, bus bandwidth 343 GB/s at 256 MB to 487 GB/s at 16 GB (same source)
comm_compute_slowdown = 0.19    # arXiv 2507.03114: compute slows 18.9% on average (40% worst) beside communication
