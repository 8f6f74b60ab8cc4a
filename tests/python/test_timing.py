"""Virtual time (issue 26): with OPENREG_DEVICE_PROFILE every time openreg reports is the modelled GPU's.

Each check runs in a subprocess with the profile set (the runtime reads it when it starts). Expected
values are computed by hand from the profile file's figures (sim/profiles/h100-sxm.profile) and the
cost model's formulas (Note [Cost model] in sim/src/cost_model.cpp).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

H100 = {"OPENREG_DEVICE_PROFILE": "h100-sxm"}
# sim/profiles/h100-sxm.profile
PEAK_BF16 = 989.4e12
GEMM_EFFICIENCY = 0.740
HOST_PER_OP_NS = 2600 + 4000  # launch_us + host_op_us
SMS = 132
# Virtual times are whole nanoseconds: each duration is rounded once.
NS_MS = 2e-6  # in milliseconds
NS_S = 2e-9  # in seconds


def run_json(run_python, check_ok, code: str, env: dict[str, str | None] | None = None):
    proc = run_python(code, env=H100 | (env or {}))
    check_ok(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_bf16_matmul_takes_the_modelled_h100_time(run_python, check_ok):
    # A small output (2 x 2 tiles) with a long K: far from peak, and cheap for this CPU's bf16 (~1 GFLOP/s).
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        a = torch.randn(256, 8192, device="openreg", dtype=torch.bfloat16)
        b = torch.randn(8192, 256, device="openreg", dtype=torch.bfloat16)
        torch.openreg.synchronize()
        start, end = torch.openreg.Event(enable_timing=True), torch.openreg.Event(enable_timing=True)
        start.record(); c = a @ b; end.record(); end.synchronize()
        print(json.dumps({"ms": start.elapsed_time(end)}))
        """,
    )
    # 2 x 2 tiles of 128 on 132 SMs: one wave using 4 SMs.
    wave_efficiency = 4 / SMS
    matmul_ns = 2 * 256 * 256 * 8192 / (PEAK_BF16 * GEMM_EFFICIENCY * wave_efficiency) * 1e9
    # The matmul starts when the host has issued it, one op after the first record.
    assert out["ms"] == pytest.approx((HOST_PER_OP_NS + matmul_ns) / 1e6, abs=NS_MS)


def test_fp32_matmuls_use_tf32_units_only_when_allowed(run_python, check_ok):
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        a = torch.randn(2048, 2048, device="openreg"); b = torch.randn(2048, 2048, device="openreg")
        def timed():
            torch.openreg.synchronize()  # the host catches up: the matmul waits for its issue, not the device
            start, end = torch.openreg.Event(enable_timing=True), torch.openreg.Event(enable_timing=True)
            start.record(); a @ b; end.record(); end.synchronize()
            return start.elapsed_time(end)
        torch.backends.cuda.matmul.allow_tf32 = False
        fp32 = timed()
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = timed()
        print(json.dumps({"fp32": fp32, "tf32": tf32}))
        """,
    )
    flops = 2 * 2048**3
    fp32_ns = flops / 66.9e12 * 1e9  # vector units, no GEMM efficiency
    tf32_ns = flops / (494.7e12 * GEMM_EFFICIENCY * (256 / (2 * SMS))) * 1e9
    assert out["fp32"] == pytest.approx((HOST_PER_OP_NS + fp32_ns) / 1e6, abs=NS_MS)
    assert out["tf32"] == pytest.approx((HOST_PER_OP_NS + tf32_ns) / 1e6, abs=NS_MS)


def test_device_properties_describe_the_model_without_claiming_cuda(run_python, check_ok):
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        p = torch.openreg.get_device_properties(0)
        print(json.dumps({"name": p.name, "sms": p.multi_processor_count, "l2": p.L2_cache_size,
                          "cuda": torch.cuda.is_available(), "profile": torch.openreg.timing.profile()["name"]}))
        """,
    )
    expected = {"name": "openreg (model of H100 SXM)", "sms": 132, "l2": 50 << 20, "cuda": False, "profile": "h100-sxm"}
    assert out == expected


STEP = """
import json, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)).to("openreg")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 512).to("openreg")
side = torch.openreg.Stream()
times = []
for step in range(3):
    with torch.openreg.timing.region() as r:
        with torch.openreg.stream(side):
            extra = torch.randn(1024, 1024, device="openreg") @ torch.randn(1024, 1024, device="openreg")
        loss = model(x).square().mean()
        loss.backward()
        opt.step(); opt.zero_grad()
        loss.item()
    times.append([r.wall, r.devices[0].compute, r.devices[0].kernels])
print(json.dumps({"times": times, "now": torch.openreg.timing.now()}))
"""


def test_the_same_training_step_gives_the_same_virtual_times_on_a_loaded_machine(run_python, check_ok):
    quiet = run_json(run_python, check_ok, STEP)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        loaded = run_json(run_python, check_ok, STEP)
        fuzzed = run_json(run_python, check_ok, STEP, env={"OPENREG_SCHEDULE_FUZZ": "7"})
        one_thread = run_json(run_python, check_ok, STEP, env={"OPENREG_COMPUTE_THREADS": "1"})
    finally:
        for h in hogs:
            h.kill()
    assert loaded == quiet  # to the nanosecond: same floats
    assert fuzzed == quiet
    assert one_thread == quiet
    wall, compute, kernels = quiet["times"][-1]
    assert 0 < compute <= wall
    assert kernels > 10


def test_a_region_reports_busy_idle_and_mfu(run_python, check_ok):
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        torch.backends.cuda.matmul.allow_tf32 = True
        a = torch.randn(2048, 1024, device="openreg")
        b = torch.randn(1024, 8448, device="openreg")
        torch.openreg.synchronize()
        with torch.openreg.timing.region(0) as big:
            a @ b
        with torch.openreg.timing.region(0) as tiny:
            x = torch.ones(16, device="openreg")
            for _ in range(100):
                x = x + 1
        print(json.dumps({"big": [big.wall, big.devices[0].compute, big.mfu],
                          "tiny": [tiny.wall, tiny.devices[0].compute, tiny.devices[0].idle, tiny.devices[0].kernels]}))
        """,
    )
    wall, compute, mfu = out["big"]
    # 16 x 66 tiles = 8 full waves on 132 SMs: the tf32 units at the measured GEMM efficiency.
    flops = 2 * 2048 * 1024 * 8448
    matmul_s = flops / (494.7e12 * GEMM_EFFICIENCY)
    assert compute == pytest.approx(matmul_s, abs=NS_S)
    assert wall == pytest.approx(matmul_s + HOST_PER_OP_NS / 1e9, abs=NS_S)
    assert mfu == pytest.approx(flops / 494.7e12 / wall, rel=1e-6)  # against the peak of its format
    wall, compute, idle, kernels = out["tiny"]
    # Launch-bound: the device waits for the host between tiny kernels.
    assert kernels == 101
    assert compute == pytest.approx(kernels * 2e-6, rel=1e-6)  # min_kernel_us each
    assert idle > 0.5 * wall


def test_two_devices_run_a_split_workload_in_half_the_virtual_time(run_python, check_ok):
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        a = [torch.randn(1024, 1024, device=f"openreg:{d}") for d in (0, 1)]
        torch.openreg.synchronize(0); torch.openreg.synchronize(1)
        with torch.openreg.timing.region() as one:
            for _ in range(8):
                a[0] @ a[0]
        with torch.openreg.timing.region() as two:
            for _ in range(4):
                a[0] @ a[0]
                a[1] @ a[1]
        print(json.dumps({"one": one.wall, "two": two.wall}))
        """,
    )
    # fp32 without tf32: the vector units (the memory time, 12 MiB, is shorter). One device runs its 8
    # back to back from the first issue; with two, device 1's first waits for its issue, one op later.
    mm_s = 2 * 1024**3 / 66.9e12
    op_s = HOST_PER_OP_NS / 1e9
    assert out["one"] == pytest.approx(op_s + 8 * mm_s, abs=8 * NS_S)
    assert out["two"] == pytest.approx(2 * op_s + 4 * mm_s, abs=8 * NS_S)
    assert out["two"] / out["one"] < 0.54


def test_a_bad_profile_is_a_clear_error_at_first_use_and_import_succeeds(run_python):
    proc = run_python(
        """
        import torch
        try:
            torch.ones(1, device="openreg")
        except Exception as e:
            print(type(e).__name__, e)
        """,
        env={"OPENREG_DEVICE_PROFILE": "tpu-v9"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "OPENREG_DEVICE_PROFILE='tpu-v9' is invalid" in proc.stdout
    assert "h100-sxm" in proc.stdout


def test_without_a_profile_nothing_is_virtual():
    assert not torch.openreg.timing.enabled()
    assert torch.openreg.timing.now() == 0.0
    with pytest.raises(RuntimeError, match="OPENREG_DEVICE_PROFILE"):
        with torch.openreg.timing.region():
            pass
    assert math.isclose(torch.openreg.get_device_properties(0).L2_cache_size, 0)
    assert torch.openreg.get_device_name(0) == "openreg"


def test_the_profiler_reports_virtual_device_times(run_python, check_ok):
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        from torch.profiler import ProfilerActivity, profile
        torch.backends.cuda.matmul.allow_tf32 = True
        a = torch.randn(2048, 1024, device="openreg"); b = torch.randn(1024, 8448, device="openreg")
        torch.openreg.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
            a @ b
            torch.openreg.synchronize()
        mm = [e for e in p.key_averages() if e.key == "aten::mm"][0]
        print(json.dumps({"device_us": mm.self_device_time_total}))
        """,
    )
    assert out["device_us"] == pytest.approx(2 * 2048 * 1024 * 8448 / (494.7e12 * GEMM_EFFICIENCY) * 1e6, abs=0.01)


def test_a_compiled_kernel_costs_its_buffers_bytes(run_python, check_ok):
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        f = torch.compile(lambda x: (x * 2 + 1).sin())
        x = torch.randn(16 << 20, device="openreg")  # 64 MiB
        f(x); torch.openreg.synchronize()  # compiled
        with torch.openreg.timing.region(0) as r:
            f(x)
        print(json.dumps({"compute": r.devices[0].compute, "kernels": r.devices[0].kernels}))
        """,
    )
    # One fused kernel reading x and writing the result: 128 MiB at the measured bandwidth.
    assert out["kernels"] == 1
    assert out["compute"] == pytest.approx(2 * (64 << 20) / (3350e9 * 0.896), abs=NS_S)


def test_measured_host_time_counts_the_threads_cpu_time(run_python, check_ok):
    out = run_json(
        run_python,
        check_ok,
        """
        import json, time, torch
        x = torch.ones(4, device="openreg"); torch.openreg.synchronize()
        t0 = torch.openreg.timing.now()
        end = time.thread_time() + 0.05
        while time.thread_time() < end:  # 50 ms of host work between two ops
            pass
        x.add_(1)
        print(json.dumps({"host_s": torch.openreg.timing.now() - t0}))
        """,
        env={"OPENREG_HOST_TIME": "measured"},
    )
    assert 0.05 <= out["host_s"] < 0.5


def test_a_convolution_and_its_backward_cost_their_flop_counter_flops(run_python, check_ok):
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        conv = torch.nn.Conv2d(64, 64, 3, padding=1).to("openreg")
        x = torch.randn(8, 64, 56, 56, device="openreg", requires_grad=True)
        y = conv(x); g = torch.ones_like(y); torch.openreg.synchronize()
        with torch.openreg.timing.region(0) as fwd:
            conv(x)
        with torch.openreg.timing.region(0) as bwd:
            y.backward(g, retain_graph=True)
        print(json.dumps({"fwd": [fwd.devices[0].compute, fwd.devices[0].kernels],
                          "bwd_kernels": bwd.devices[0].kernels, "bwd": bwd.devices[0].compute}))
        """,
    )
    # flop_counter: 2 x output elements x (input channels x kernel elements); cuDNN may use tf32 for
    # fp32 convolutions by default (torch.backends.cudnn.allow_tf32). As a GEMM: 8*56*56 output
    # pixels by 64 channels: 196 x 1 tiles on 132 SMs, two waves.
    flops = 2 * (8 * 64 * 56 * 56) * (64 * 3 * 3)
    rate = 494.7e12 * GEMM_EFFICIENCY * (196 / (2 * SMS))
    compute, kernels = out["fwd"]
    assert kernels == 1
    assert compute == pytest.approx(flops / rate, abs=NS_S)
    # Backward: grad input and grad weight, each the forward's flops, in one convolution_backward
    # kernel, plus AccumulateGrad's kernels (memory-bound) for the weight and bias gradients.
    assert out["bwd"] >= 2 * flops / rate - NS_S  # whole nanoseconds: the kernel's time is rounded once
    assert out["bwd"] < 2 * flops / rate + 4 * 3e-6


def test_inductor_plans_with_the_modelled_runtimes(run_python, check_ok):
    # Inductor's scheduler asks config.estimate_op_runtime (Note [Inductor's runtime estimates]); a
    # pre-fusion pass reads the estimates of a compiled matmul + relu through Inductor's own entry.
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        from torch._inductor import comms, config
        estimates = []
        def grab(snodes):
            estimates.extend([comms.estimate_op_runtime(s), s.estimate_flops() or 0] for s in snodes)
            return snodes
        config._pre_fusion_custom_pass = grab
        torch.backends.cuda.matmul.allow_tf32 = True
        f = torch.compile(lambda a, b: (a @ b).relu())
        f(torch.randn(2048, 1024, device="openreg"), torch.randn(1024, 8448, device="openreg"))
        print(json.dumps(estimates))
        """,
    )
    flops = 2 * 2048 * 1024 * 8448
    by_flops = {f: ms for ms, f in out}
    assert by_flops[flops] == pytest.approx(flops / (494.7e12 * GEMM_EFFICIENCY) * 1e3, rel=1e-9)  # the mm
    # The relu reads and writes the 2048 x 8448 product: memory-bound.
    assert by_flops[0] == pytest.approx(2 * 2048 * 8448 * 4 / (3350e9 * 0.896) * 1e3, rel=1e-9)


def test_timing_only_execution_times_a_full_size_matmul_reads_zeros_and_runs_out_where_the_gpu_would(
    run_python, check_ok
):
    out = run_json(
        run_python,
        check_ok,
        """
        import json, time, warnings, torch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.openreg.init()
        a = torch.empty(8192, 8192, device="openreg", dtype=torch.bfloat16)
        t0 = time.perf_counter()
        start, end = torch.openreg.Event(enable_timing=True), torch.openreg.Event(enable_timing=True)
        start.record(); c = a @ a; end.record(); end.synchronize()
        wall = time.perf_counter() - t0
        try:
            torch.empty(90 << 30, dtype=torch.uint8, device="openreg")
            oom = ""
        except torch.OutOfMemoryError as e:
            oom = str(e)
        print(json.dumps({"ms": start.elapsed_time(end), "wall": wall, "value": c[0, 0].item(),
                          "warnings": [str(w.message) for w in caught], "oom": oom,
                          "capacity": torch.openreg.get_device_properties(0).total_memory}))
        """,
        env={"OPENREG_EXECUTE": "timing"},
    )
    # 64 x 64 tiles of 128 on 132 SMs: 32 waves, the last holding 4 tiles. On this CPU the real
    # matmul would take about 20 minutes (bf16 at ~1 GFLOP/s); timed only, it takes milliseconds.
    matmul_ns = 2 * 8192**3 / (PEAK_BF16 * GEMM_EFFICIENCY * (4096 / (32 * SMS))) * 1e9
    assert out["ms"] == pytest.approx((HOST_PER_OP_NS + matmul_ns) / 1e6, abs=NS_MS)
    assert out["wall"] < 5
    assert out["value"] == 0.0
    assert [w for w in out["warnings"] if "OPENREG_EXECUTE=timing" in w and "zero" in w]
    assert out["capacity"] == 80 << 30  # the H100 profile's memory, reserved without backing pages
    assert out["oom"]


GPT2_STEP = """
import json, sys, torch, torch.nn as nn
batch = int(sys.argv[1])

class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))

class GPT(nn.Module):  # GPT-2 124M: 12 layers, d=768, 12 heads, 50257 tokens, 1024 positions
    def __init__(self, vocab=50257, ctx=1024, d=768, layers=12, heads=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        mask = torch.triu(torch.full((t, t), float("-inf"), device=idx.device), 1)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))

with torch.device("meta"):  # no host memory for the values
    model = GPT()
model = model.to_empty(device="openreg").to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
idx = torch.zeros(batch, 1024, dtype=torch.long, device="openreg")
steps = []
try:
    for _ in range(2):
        with torch.openreg.timing.region() as r:
            logits = model(idx)
            loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)).float(), idx.view(-1))
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
            value = loss.item()
        steps.append([r.wall, r.mfu])
    print(json.dumps({"steps": steps, "loss": value, "peak": torch.openreg.max_memory_allocated(),
                      "params": sum(p.numel() for p in model.parameters())}))
except torch.OutOfMemoryError as e:
    print(json.dumps({"oom": str(e)}))
"""


def test_a_gpt2_training_step_is_sized_in_timing_only_execution(run_python, check_ok):
    env = {"OPENREG_EXECUTE": "timing", "OPENREG_DEVICE_COUNT": "1"}
    first = run_json(run_python, check_ok, GPT2_STEP.replace("int(sys.argv[1])", "12"), env=env)
    again = run_json(run_python, check_ok, GPT2_STEP.replace("int(sys.argv[1])", "12"), env=env)
    assert first == again  # the predicted step time, MFU and peak: the same on every run
    assert 124e6 < first["params"] < 164e6  # GPT-2 124M (its head is not tied to the embedding here)
    wall, mfu = first["steps"][1]
    assert 0.01 < wall < 1.0  # seconds on the modelled H100
    assert 0.05 < mfu < 0.6
    assert first["loss"] == 0.0  # values are zeros in this mode
    # Parameters, gradients and AdamW's two states in bf16 at least; less than the H100's 80 GiB.
    assert 8 * first["params"] < first["peak"] < 80 << 30
    too_big = run_json(run_python, check_ok, GPT2_STEP.replace("int(sys.argv[1])", "96"), env=env)
    assert "out of memory" in too_big["oom"].lower()


def test_attention_backward_is_costed_from_its_query_key_and_value(run_python, check_ok):
    # Cross attention (L=1024 queries over S=4096 keys, compute-bound on the h100 profile; fp32, so on the
    # vector units at their peak): the backward executes 2.5 times the forward's matmul work (Note
    # [Attention's cost]). Its first argument is grad_out, so costing it from arguments 0-2 like the
    # forward took (grad_out, query, key) for (q, k, v): S read as L, a quarter of the FLOPs.
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        q = torch.randn(2, 4, 1024, 64, device="openreg")
        k = torch.randn(2, 4, 4096, 64, device="openreg")
        v = torch.randn(2, 4, 4096, 64, device="openreg")
        ops = torch.ops.aten
        def compute(fn):
            torch.openreg.synchronize()
            with torch.openreg.timing.region(0) as r:
                result = fn()
            return result, r.devices[0].compute
        (o, lse), forward = compute(lambda: ops._scaled_dot_product_flash_attention_for_cpu(q, k, v))
        _, backward = compute(lambda: ops._scaled_dot_product_flash_attention_for_cpu_backward(
            torch.ones_like(o), q, k, v, o, lse, 0.0, False))
        print(json.dumps({"forward": forward, "backward": backward}))
        """,
        env={"OPENREG_EXECUTE": "timing"},
    )
    assert out["backward"] == pytest.approx(2.5 * out["forward"], rel=0.01)


def test_causal_attention_runs_at_the_profiles_attention_rate_over_its_unmasked_half(run_python, check_ok):
    # bf16 causal self-attention through F.scaled_dot_product_attention, forward and backward: its work is
    # the unmasked part of the L x L scores (query i sees i + 1 keys), the backward 2.5 times the
    # forward's, each at the h100 profile's attention efficiency for its direction and L keys per query
    # (sim/profiles/h100-sxm.profile), not at a GEMM's 0.740.
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        import torch.nn.functional as F
        q, k, v = (torch.randn(1, 16, 2048, 128, device="openreg", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        torch.openreg.synchronize()
        with torch.openreg.timing.region(0) as fwd:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        with torch.openreg.timing.region(0) as bwd:
            o.backward(torch.ones_like(o))
        print(json.dumps({"forward": fwd.devices[0].breakdown.attention,
                          "backward": bwd.devices[0].breakdown.attention}))
        """,
        env={"OPENREG_EXECUTE": "timing"},
    )
    heads, length, dim = 16, 2048, 128
    work = 4.0 * heads * length * length * dim * (length + 1) / (2 * length)  # q k^T and p v, unmasked
    ramp = length / (length + 300)  # attention_half_keys
    assert out["forward"] == pytest.approx(work / (PEAK_BF16 * 0.349 * ramp), abs=NS_S)
    assert out["backward"] == pytest.approx(2.5 * work / (PEAK_BF16 * 0.333 * ramp), abs=NS_S)


def test_a_region_reports_the_devices_the_process_used_and_its_mfu_over_them(run_python, check_ok):
    # Issue 44: a rank working on openreg:1 saw openreg:0 reported idle for the whole step, and the
    # step's MFU halved by it. A region reports the devices that work was issued to during it, by any
    # thread (a kernel, a copy, a collective), else the current device.
    out = run_json(
        run_python,
        check_ok,
        """
        import json, threading, torch
        torch.openreg.set_device(1)
        a = torch.randn(1024, 1024, device="openreg")
        host = torch.randn(1024, 1024).pin_memory()
        torch.openreg.synchronize()

        def devices(r):
            return [d.device for d in r.devices]

        with torch.openreg.timing.region() as matmul:
            a @ a
        with torch.openreg.timing.region() as copy:  # a copy alone: no kernel, the copy engine only
            host.to("openreg", non_blocking=True)
        with torch.openreg.timing.region() as nothing:
            pass
        torch.openreg.set_device(0)
        with torch.openreg.timing.region() as other_thread:  # as autograd's device thread issues backward
            t = threading.Thread(target=lambda: a @ a)
            t.start(); t.join()
        with torch.openreg.timing.region(0) as asked:
            a @ a
        print(json.dumps({
            "matmul": devices(matmul), "mfu": [matmul.mfu, matmul.devices[0].mfu],
            "copy": devices(copy), "nothing": devices(nothing), "other_thread": devices(other_thread),
            "asked": devices(asked)}))
        """,
    )
    assert out["matmul"] == [1]
    assert out["mfu"][0] == out["mfu"][1] > 0  # the used device's MFU, not its mean with an idle one
    assert out["copy"] == [1]
    assert out["nothing"] == [1]  # nothing issued: the current device
    assert out["other_thread"] == [1]  # not the current device 0: another thread's work was on 1
    assert out["asked"] == [0]  # a device asked for is reported, used or not


def test_the_timing_only_warning_is_said_by_rank_zero_only(run_python, check_ok):
    # Issue 44: every rank of a sizing job printed the same multi-line warning (eight copies).
    code = """
        import torch
        torch.ones(1, device="openreg")
        """
    env = {"OPENREG_EXECUTE": "timing", "RANK": None}
    said = {}
    for rank in (None, "0", "1", " 3 "):
        proc = run_python(code, env=H100 | env | {"RANK": rank})
        check_ok(proc)
        said[rank] = proc.stderr.count("OPENREG_EXECUTE=timing")
    assert said == {None: 1, "0": 1, "1": 0, " 3 ": 0}


TWO_STAGE_STEP = """
import json, torch, torch.nn as nn
torch.manual_seed(0)
d, heads = 256, 4

class Block(nn.Module):  # pre-norm attention (SDPA, causal) and MLP
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))

# Two pipeline stages, one per device: each waits for its host and for the other device.
stages = [Block().to("openreg:0"), Block().to("openreg:1")]
opt = torch.optim.AdamW([p for s in stages for p in s.parameters()], lr=1e-3, fused=True)
x = torch.randn(8, 256, d, device="openreg:0")
for _ in range(2):  # the second step, when AdamW's states exist
    with torch.openreg.timing.region() as r:
        stages[1](stages[0](x).to("openreg:1")).square().mean().backward()
        opt.step(); opt.zero_grad()
print(json.dumps({"wall": r.wall, "text": str(r), "devices": {
    d.device: {"breakdown": d.breakdown.as_dict(), "compute": d.compute, "idle": d.idle} for d in r.devices}}))
"""


def ns(seconds: float) -> int:
    return round(seconds * 1e9)


def test_a_steps_time_by_op_class_sums_to_its_wall_time_on_every_device(run_python, check_ok):
    # Issue 39: where a step's time goes, by op class, each instant once (Note [Where time goes] in
    # sim/src/virtual_clock.cpp), so the classes add up to the step.
    out = run_json(run_python, check_ok, TWO_STAGE_STEP, env={"OPENREG_DEVICE_COUNT": "2"})
    assert sorted(out["devices"]) == ["0", "1"]
    for device in out["devices"].values():
        b = device["breakdown"]
        assert list(b) == ["matmul", "attention", "memory_bound", "optimizer", "copies", "exposed_comm", "idle"]
        assert sum(ns(v) for v in b.values()) == ns(out["wall"])  # to the nanosecond
        assert ns(b["matmul"] + b["attention"] + b["memory_bound"] + b["optimizer"]) == ns(device["compute"])
        assert b["idle"] == device["idle"] > 0  # each stage waits for the other
        # The linears, SDPA's fused kernels, layer norms and GELU, and fused AdamW's kernel each show.
        assert min(b["matmul"], b["attention"], b["memory_bound"], b["optimizer"]) > 0
        assert b["exposed_comm"] == 0  # no collective in this step
    assert out["text"].count("time by class: matmul") == 2


def test_a_matmul_heavy_step_is_mostly_matmul(run_python, check_ok):
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        shape = dict(device="openreg", dtype=torch.bfloat16)
        ws = [torch.empty(8192, 8192, **shape, requires_grad=True) for _ in range(4)]
        x = torch.empty(8192, 8192, **shape)
        with torch.openreg.timing.region() as r:
            y = x
            for w in ws:
                y = y @ w
            y.sum().backward()
        print(json.dumps({"wall": r.wall, "breakdown": r.devices[0].breakdown.as_dict()}))
        """,
        env={"OPENREG_EXECUTE": "timing"},
    )
    b = out["breakdown"]
    assert sum(ns(v) for v in b.values()) == ns(out["wall"])
    assert b["matmul"] > 0.9 * out["wall"]


def test_a_launch_bound_loop_of_tiny_kernels_is_mostly_idle(run_python, check_ok):
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        a = torch.zeros(64, device="openreg")
        torch.openreg.synchronize()
        with torch.openreg.timing.region() as r:
            for _ in range(200):
                a = a + 1
        print(json.dumps({"wall": r.wall, "breakdown": r.devices[0].breakdown.as_dict(), "text": str(r)}))
        """,
    )
    b = out["breakdown"]
    assert sum(ns(v) for v in b.values()) == ns(out["wall"])
    # Each kernel takes the device's minimum kernel time; the host takes longer to issue the next.
    assert b["idle"] > 0.5 * out["wall"]
    assert b["memory_bound"] > 0 and b["matmul"] == b["attention"] == b["optimizer"] == 0
    assert "time by class: memory-bound" in out["text"] and "idle" in out["text"].splitlines()[-1]


def test_a_foreach_optimizer_steps_kernels_count_as_the_optimizers(run_python, check_ok):
    """torch.optim's default (foreach) and single-tensor steps reach openreg as per-tensor elementwise
    kernels; the step hooks mark them (Note [Optimizer steps on the virtual clock]), so a region's
    breakdown shows them as optimizer time, and the forward and backward's elementwise kernels stay
    memory-bound. Only the class changes, never a kernel's time."""
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch, torch.nn as nn
        model = nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1024)).to("openreg")
        x = torch.empty(64, 1024, device="openreg")
        figures = {}
        for foreach in (True, False):
            opt = torch.optim.AdamW(model.parameters(), foreach=foreach)
            model(x).sum().backward()
            opt.step()  # the optimizer's states are made here
            with torch.openreg.timing.region() as fwd:
                model(x).sum().backward()
            with torch.openreg.timing.region() as step:
                opt.step()
            figures[str(foreach)] = {"fwd": fwd.devices[0].breakdown.as_dict(),
                                     "step": step.devices[0].breakdown.as_dict(), "step_wall": step.wall}
        print(json.dumps(figures))
        """,
        env={"OPENREG_EXECUTE": "timing"},
    )
    for figures in out.values():
        assert figures["fwd"]["optimizer"] == 0 and figures["fwd"]["memory_bound"] > 0
        step = figures["step"]
        assert step["memory_bound"] == 0 and step["matmul"] == 0
        assert step["optimizer"] > 0
        assert sum(ns(v) for v in step.values()) == ns(figures["step_wall"])


def test_dropout_costs_cudas_one_fused_kernel(run_python, check_ok):
    # openreg builds native_dropout from four kernels (bernoulli_, mul, mul_, a cast to bool); CUDA runs
    # one, reading the input and writing the output and a bool mask (Note [Kernels CUDA fuses]). On the
    # virtual clock the four together cost that one kernel, the three others the minimum kernel time.
    out = run_json(
        run_python,
        check_ok,
        """
        import json, torch
        x = torch.empty(1 << 26, device="openreg", dtype=torch.bfloat16)
        torch.openreg.synchronize()
        with torch.openreg.timing.region(0) as r:
            torch.nn.functional.dropout(x, 0.1, training=True)
        print(json.dumps({"memory_bound": r.devices[0].breakdown.memory_bound, "kernels": r.devices[0].kernels}))
        """,
        env={"OPENREG_EXECUTE": "timing"},
    )
    elements = 1 << 26
    assert out["kernels"] == 4
    fused = elements * (2 + 2 + 1) / (3350e9 * 0.896)  # bf16 in, bf16 out, bool mask
    assert out["memory_bound"] == pytest.approx(fused + 3 * 2e-6, abs=4 * NS_S)


def test_an_allocation_never_waits_for_the_modelled_gpu(run_python, check_ok):
    """The caching allocator reuses a freed block once its last use on another stream (record_stream) is
    over, and asks without waiting, as CUDA's asks cudaEventQuery. Under a profile that use is over when
    the modelled GPU has reached it, not when this CPU's device threads have run it: they ran the side
    stream's matmuls at once (timing-only execution), and the allocator used to take that as done, reuse
    the block and move the host's clock to the matmuls' modelled end. So whether an allocation waited
    for the device depended on how far this CPU had got (a torchtitan step of one symmetric stand-in read
    21 us longer than its 8 processes', and varied between runs)."""
    out = run_json(
        run_python,
        check_ok,
        """
        import json, time, warnings, torch
        warnings.simplefilter("ignore")
        side = torch.openreg.Stream()
        a = torch.empty(4096, 4096, device="openreg", dtype=torch.bfloat16)
        x = torch.empty(256, device="openreg")
        torch.openreg.synchronize()
        with torch.openreg.stream(side):
            for _ in range(10):
                a @ a                       # 0.19 ms each on the modelled H100
            x.add_(1)
        x.record_stream(side)
        ptr = x.data_ptr()
        del x
        time.sleep(0.5)                     # this CPU ran the side stream long ago
        before = torch.openreg.timing.now()
        y = torch.empty(256, device="openreg")
        waited = torch.openreg.timing.now() - before
        side.synchronize()
        print(json.dumps({"waited": waited, "reused": y.data_ptr() == ptr,
                          "device_ahead": torch.openreg.timing.now() - before}))
        """,
        env={"OPENREG_EXECUTE": "timing"},
    )
    assert out["device_ahead"] > 1e-3  # the modelled GPU was still in the matmuls at the allocation
    assert out["waited"] == 0, out  # the allocation did not wait for it
    assert not out["reused"], out  # and, as on a GPU, the block was still in use: a new one served it
