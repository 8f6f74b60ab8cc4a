"""torchtitan (the pinned 0.3.0, tests/ecosystem/requirements.txt) trains its debug model on openreg, as a
user starts it: ``torchrun -m torchtitan.train --module llama3 --config ...``, torchtitan's code unchanged
(issue 40). Its tokenizer and dataset are stand-ins built offline (torchtitan_assets.py).

What the run needs and why (docs/distributed.md, "torchtitan"):
- ``llama3_debugmodel_varlen_attn``, torchtitan's own variant of the debug model with varlen attention
  (torch.nn.attention.varlen, which runs _flash_attention_forward/_backward by name: Note [CUDA's
  attention kernels on openreg]). The default ``llama3_debugmodel`` uses FlexAttention, which torch 2.13
  refuses for any device type outside a fixed list (torch/nn/attention/flex_attention.py,
  ``_validate_device``), and whose backward torch 2.13 refuses on CPU as well.
- ``--parallelism.spmd-backend partial_dtensor``: torchtitan 0.3.0's default ``spmd_types`` passes
  ``fully_shard`` arguments of a later torch (``dp_mesh_dims``); torch 2.13's FSDP2 refuses them with more
  than one rank on any device.
- ``--training.mixed-precision-param float32``: openreg runs the CPU's kernels, and this CPU has no bf16
  matrix units (bf16 steps take ~6x longer); the loss curve is the same model's.
- torch.distributed.set_timeout, which torchtitan calls after its first step, comes from openreg on torch
  2.13 (Note [torch.distributed.set_timeout on torch 2.13]).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchtitan", reason="the ecosystem tests run in build/ecosystem-venv (make test-ecosystem)")

from openreg_titan import log_lines, sizing_args  # noqa: E402  (tests/ecosystem, beside this file)
from torchtitan_assets import build as build_assets  # noqa: E402

STEPS = 10
STEP_LINE = re.compile(r"step:\s*(\d+)\s+loss:\s*([0-9.]+)\s+grad_norm:\s*([0-9.]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("torchtitan_assets")
    build_assets(str(root))
    return root


def _train(run_torchrun, assets: Path, out: Path, nproc: int, env=None, steps: int = STEPS,
           checkpoint=("--checkpoint.no-enable",)):
    return run_torchrun(
        "-m", "torchtitan.train",
        "--module", "llama3", "--config", "llama3_debugmodel_varlen_attn",
        "--hf-assets-path", assets / "tokenizer", "--dataloader.dataset-path", assets / "c4_test",
        "--dump-folder", out,
        "--training.steps", steps, "--training.seq-len", 256, "--training.local-batch-size", 2,
        "--training.mixed-precision-param", "float32", "--parallelism.spmd-backend", "partial_dtensor",
        "--debug.seed", 0, "--validator.no-enable", *checkpoint, "--metrics.disable-color-printing",
        nproc=nproc, env={"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(out / "hf"),
                          **(env or {})},
    )


def _losses_and_norms(output: str) -> dict[int, tuple[float, float]]:
    """(loss, gradient norm) per step; every rank logs the same (averaged) values, the first is kept."""
    rows: dict[int, tuple[float, float]] = {}
    for m in map(STEP_LINE.search, ANSI.sub("", output).splitlines()):
        if m:
            rows.setdefault(int(m.group(1)), (float(m.group(2)), float(m.group(3))))
    return rows


def _losses(output: str) -> dict[int, float]:
    return {step: loss for step, (loss, _) in _losses_and_norms(output).items()}


@pytest.mark.parametrize("nproc", [1, 2])
def test_debug_model_trains_in_one_process_and_under_fsdp_on_two_devices(run_torchrun, assets, tmp_path, nproc):
    done = _train(run_torchrun, assets, tmp_path, nproc=nproc)
    output = done.stdout + done.stderr
    losses = _losses(output)
    # Every step ran, past the first (after which torchtitan calls torch.distributed.set_timeout).
    assert sorted(losses) == list(range(1, STEPS + 1)), output[-4000:]
    assert all(math.isfinite(v) for v in losses.values())
    # The stand-in vocabulary is the debug model's (2048): an untrained model starts near ln(2048) = 7.6
    # per token, and a few steps at lr 8e-4 bring it down.
    assert 7.0 < losses[1] < 9.0
    assert losses[STEPS] < losses[1] - 0.1, losses
    assert "Training completed" in output


def test_a_checkpoint_saved_under_fsdp_resumes_to_the_losses_of_an_unbroken_run(run_torchrun, assets, tmp_path):
    """torchtitan's distributed checkpoint (DCP: each rank saves its FSDP shards of the model and the
    optimizer, with the data loader's place and the step) saved on openreg after step 2 and loaded by a
    second run, which trains on from step 3 to the losses and gradient norms of a run never stopped, to
    the last printed digit: every state it depends on came back."""
    first = _train(run_torchrun, assets, tmp_path / "unbroken", nproc=2, steps=4)
    unbroken = _losses_and_norms(first.stdout + first.stderr)
    save = ("--checkpoint.enable", "--checkpoint.interval", 2, "--checkpoint.no-last-save-model-only")
    _train(run_torchrun, assets, tmp_path / "resumed", nproc=2, steps=2, checkpoint=save)
    assert (tmp_path / "resumed" / "checkpoint" / "step-2").is_dir()
    done = _train(run_torchrun, assets, tmp_path / "resumed", nproc=2, steps=4, checkpoint=save)
    output = ANSI.sub("", done.stdout + done.stderr)
    assert "Loading the checkpoint from" in output, output[-4000:]
    resumed = _losses_and_norms(output)
    assert sorted(resumed) == [3, 4], resumed  # it went on from the saved step, not from the start
    assert sorted(unbroken) == [1, 2, 3, 4] and unbroken[4] != unbroken[3]
    assert resumed == {step: unbroken[step] for step in (3, 4)}, (resumed, unbroken)


TPS_LINE = re.compile(r"step:\s*(\d+)\s.*tps:\s*([0-9,]+)\s+tflops:\s*([0-9.]+)\s+mfu:\s*([0-9.]+)%")


def test_under_a_profile_torchtitans_own_throughput_lines_are_the_modelled_gpus(run_torchrun, assets, tmp_path):
    """torchtitan times its log interval with time.perf_counter; with OPENREG_PERF_COUNTER=virtual that is
    the virtual clock (Note [A program's own timer under a profile]), so its tokens/s, TFLOPs and MFU
    lines describe the modelled H100, torchtitan's code unchanged."""
    done = _train(run_torchrun, assets, tmp_path, nproc=2,
                  env={"OPENREG_DEVICE_PROFILE": "h100-sxm", "OPENREG_PERF_COUNTER": "virtual"})
    output = ANSI.sub("", done.stdout + done.stderr)
    lines = [TPS_LINE.search(line) for line in output.splitlines()]
    rows = [(int(m.group(1)), float(m.group(2).replace(",", "")), float(m.group(3)), float(m.group(4)))
            for m in lines if m]
    assert sorted({step for step, *_ in rows}) == list(range(1, STEPS + 1)), output[-4000:]
    for step, tps, tflops, mfu in rows:
        # On this CPU the two ranks train about 250 tokens/s each (a step of 2 x 256 tokens takes ~2 s);
        # the modelled H100 runs the 6 M-parameter model launch-bound, at tens of thousands.
        assert 5_000 < tps < 1_000_000, (step, tps)
        assert abs(mfu - tflops / 989 * 100) < 0.01, (step, tflops, mfu)  # MFU against the H100's 989 TFLOPS
    assert _losses(output)[STEPS] < _losses(output)[1]  # it trained, for real, as without a profile


def test_peak_flops_torchtitan_reads_are_the_modelled_gpus():
    """torchtitan's MFU divides by torchtitan.tools.utils.get_peak_flops(device name): under a device
    profile openreg's device name is the modelled GPU's ("openreg (model of H100 SXM)")."""
    probe = (
        "import torch; from torchtitan.tools.utils import get_peak_flops; "
        "print(get_peak_flops(torch.openreg.get_device_name(0)))"
    )
    want = {"h100-sxm": 989e12, "a100-sxm": 312e12, "mi300x": 1300e12}  # torchtitan's dense bf16 figures
    for profile, peak in want.items():
        got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                             env={**os.environ, "OPENREG_DEVICE_PROFILE": profile})
        assert float(got.stdout.strip().splitlines()[-1]) == peak, (profile, got.stdout, got.stderr)


SIZING_ENV = {"OPENREG_DEVICE_PROFILE": "h100-sxm-500w", "OPENREG_PERF_COUNTER": "virtual",
              "PYTHONPATH": str(Path(__file__).parent), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def _stand_in(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """torchtitan's command line ``args`` as one symmetric stand-in for 8 ranks, in the sizing environment."""
    return subprocess.run(
        [sys.executable, "-m", "torch_openreg.symmetric", "--world-size", "8", *args], capture_output=True,
        text=True, timeout=400, env={**os.environ, **SIZING_ENV, "HF_HOME": str(tmp_path / "hf"), **env})


def test_timing_only_llama3_8b_on_8_ranks_prints_the_modelled_h100s_figures(run_torchrun, assets, tmp_path):
    """torchtitan's Llama 3 8B as its H100 report ran it (FSDP over 8 ranks, local batch 2, sequence 8192,
    selective activation checkpointing, bf16 with fp32 reductions), sized in timing-only execution on the
    500 W H100 profile: its own log lines are the modelled GPU's. The published row is 5,762 tokens/s per
    GPU (torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 1). It needs timing-only execution
    to compute what the program computes from its own data (the varlen attention's document boundaries
    from the position ids; Note [Values in timing-only execution] in sim/src/stream.cpp): without it the
    debug model stopped at its third step ("cumulative sequence lengths must be non-decreasing").
    The same job with one process standing for its 8 ranks (python -m torch_openreg.symmetric) prints
    the same lines."""
    args = sizing_args(assets, tmp_path, "llama3_8b_varlen", 2, "--training.local-batch-size", 2)
    symmetric = _stand_in(args, tmp_path)
    assert symmetric.returncode == 0, symmetric.stderr[-4000:]
    done = run_torchrun(*args, nproc=8, timeout=400, env={**SIZING_ENV, "OPENREG_EXECUTE": "timing",
                                                          "OPENREG_DEVICE_COUNT": "8", "HF_HOME": str(tmp_path / "hf")})
    steps = log_lines(done.stdout + done.stderr)
    assert sorted(steps) == [1, 2] and all(len(v) == 8 for v in steps.values()), steps  # every rank, each step
    mem, tps, tflops, mfu = steps[2][0]
    assert all(row == steps[2][0] for row in steps[2])
    # Within a third of the published row (5,762 tokens/s, 37.6% MFU): a sizing run that read the host's
    # clock or timed kernels as free would be orders of magnitude off.
    assert 4_000 < tps < 8_000, tps
    assert 25 < mfu < 50 and abs(mfu - tflops / 989 * 100) < 0.01, (tflops, mfu)
    assert 40 < mem < 80, mem  # GiB reserved, of the 500 W part's 96 GB
    # The stand-in's lines are the processes', to the last digit: its steps take what theirs take to the
    # nanosecond (they took 21 us longer while the caching allocator read this CPU's progress as the
    # GPU's: Note [Virtual time] in sim/src/virtual_clock.cpp).
    stand_in = log_lines(symmetric.stdout + symmetric.stderr)
    assert sorted(stand_in) == [1, 2] and all(len(v) == 1 for v in stand_in.values()), stand_in
    for step in (1, 2):
        assert stand_in[step][0] == steps[step][0], (step, stand_in[step], steps[step][0])


def test_timing_only_compiled_llama3_8b_builds_no_kernel_it_does_not_run(assets, tmp_path):
    """torchtitan's per-block torch.compile (and its compiled loss) in timing-only execution, the 8B row on
    8 ranks as one symmetric stand-in: Inductor traces and fuses as for a GPU, but openreg builds no kernel
    that does not run (Note [Compiled kernels in timing-only execution]), so the job reaches its first step
    in seconds (35 s in all on this 2-core machine, 46 s when every kernel was built: docs/compile.md).
    Each compiled kernel is still timed from its buffers."""
    args = sizing_args(assets, tmp_path, "llama3_8b_varlen", 2, "--training.local-batch-size", 2, "--compile.enable")
    cache = tmp_path / "inductor"
    done = _stand_in(args, tmp_path, TORCHINDUCTOR_CACHE_DIR=str(cache))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "Compiling each TransformerBlock with torch.compile" in output
    steps = log_lines(output)
    assert sorted(steps) == [1, 2], output[-4000:]
    mem, tps, tflops, mfu = steps[2][0]
    # The published compiled row is 6,667 tokens/s (torchtitan's report, Table 1); the eager one, 5,762,
    # reads 6,020 here.
    assert 4_000 < tps < 12_000 and abs(mfu - tflops / 989 * 100) < 0.01, steps[2]
    # Inductor generated openreg kernels (its wrappers call openreg_cpp_pybinding) and built none of them.
    assert any("openreg_cpp_pybinding(" in p.read_text(errors="replace") for p in cache.rglob("*.py"))
    assert not [p for p in cache.rglob("*.cpp") if "openreg_compiled" in p.read_text(errors="replace")
                and p.with_suffix(".so").exists()]
