"""The calibration set's programs (bench/python/calibration_bench.py, issue 39) on scaled-down
configurations: each runs on its ranks in timing-only execution and reports a self-consistent
breakdown. No band against the published figures is asserted: no profile is calibrated to them yet."""

from dataclasses import replace

import pytest
from support import calibration as cb  # tests/support (pytest's pythonpath)

GIB = 1 << 30


def _row(name, **config):
    row = next(r for r in cb.ROWS if r.name == name)
    return replace(row, config=replace(row.config, **config), gpus=config.get("ranks", row.gpus))


def _check(r, tokens_per_gpu_step):
    r0 = r["rank0"]
    assert r["ranks_agree"]  # every rank's step ends at the same virtual time
    assert r["tok_s_gpu"] * r["step_s"] == pytest.approx(tokens_per_gpu_step, rel=1e-9)
    assert 0 < r["mfu"] < 1 and 0 < r0["hw_mfu"] < 1
    assert 0 < r0["compute_s"] <= r["step_s"]
    assert 0 <= r0["exposed_comm_s"] <= r0["comm_s"] <= r["step_s"]
    assert 0 < r0["peak_allocated"] <= r0["peak_reserved"] <= r0["capacity"]
    assert r["ratio"] == pytest.approx(r["tok_s_gpu"] / r["published"]["tok_s_gpu"])


def test_llama_fsdp2_with_selective_activation_checkpointing():
    row = _row("titan-llama3.1-8b-fsdp8-h100", dim=256, layers=2, heads=4, kv_heads=2, ffn_hidden=512,
               vocab=1024, seq=512, batch=2, ranks=2, ac="op")
    r = cb.run_row(row, steps=1)
    _check(r, 2 * 512)
    assert r["rank0"]["comm_s"] > 0  # FSDP2's all-gathers and reduce-scatters
    # Recomputation costs FLOPs the model's count leaves out: the kernels' MFU exceeds the model's.
    assert r["rank0"]["hw_mfu"] > r["mfu"]


def test_megatron_tensor_and_sequence_parallel_with_selective_recompute():
    row = _row("megatron-22b-tp8-sp-sel-a100", hidden=256, layers=2, heads=4, vocab=1024, seq=256, batch=2,
               ranks=2)
    r = cb.run_row(row, steps=1)
    _check(r, 2 * 256 / 2)  # tensor parallel: the ranks share each sequence
    assert r["rank0"]["comm_s"] > 0


def test_gpt_fast_decode_is_memory_bound():
    row = _row("gpt-fast-llama2-7b-decode-a100", dim=512, layers=2, heads=4, ffn_hidden=1024, vocab=1024,
               new_tokens=16)
    r = cb.run_row(row, steps=1)
    _check(r, 16)
    # Batch-1 decode reads every weight per token, so its effective rate is at most the memory's peak
    assert 0 < r["bw_gbs"] * 1e9 <= r["rank0"]["memory_bandwidth"]
