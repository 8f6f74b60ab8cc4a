"""The calibration set (bench/python/calibration_bench.py, issue 39): published training and inference
jobs rebuilt as programs and run in timing-only execution. Two rows run at their published size and must
stay in their band (throughput within 10% of the published figure, peak memory within 5% where the
source gives it): a change to the timing model or a profile that moves them out fails here. The others
take minutes (make bench runs them); torchtitan's 8B row is outside its band today (docs/timing.md says
why), so it is not asserted. The Llama program runs scaled down and checks that its figures agree with
each other."""

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


# The band of a published row (issue 39): throughput within 10%, peak memory within 5%.
THROUGHPUT_BAND = 0.10
MEMORY_BAND = 0.05


def _in_band(r):
    assert abs(r["ratio"] - 1) <= THROUGHPUT_BAND, (r["row"], r["ratio"])
    if "mem_gib" in r["published"]:
        assert abs(r["mem_ratio"] - 1) <= MEMORY_BAND, (r["row"], r["mem_ratio"])


def test_megatron_22b_with_sequence_parallelism_on_8_a100s_is_within_its_band():
    # Full size: 8 ranks of Megatron's GPT 22B, TP8 with sequence parallelism and selective recompute
    row = next(r for r in cb.ROWS if r.name == "megatron-22b-tp8-sp-sel-a100")
    r = cb.run_row(row, steps=1)
    _check(r, row.config.batch * row.config.seq / row.config.ranks)
    assert r["rank0"]["exposed_comm_s"] > 0  # tensor parallelism's collectives are on the critical path
    _in_band(r)


def test_gpt_fast_llama2_7b_decode_on_an_a100_is_within_its_band():
    row = next(r for r in cb.ROWS if r.name == "gpt-fast-llama2-7b-decode-a100")
    r = cb.run_row(row, steps=1)
    _check(r, row.config.new_tokens)
    # Batch-1 decode reads every weight per token, so its effective rate is at most the memory's peak
    assert 0 < r["bw_gbs"] * 1e9 <= r["rank0"]["memory_bandwidth"]
    _in_band(r)


def test_llama_fsdp2_with_selective_activation_checkpointing():
    row = _row("titan-llama3.1-8b-fsdp8-h100", dim=256, layers=2, heads=4, kv_heads=2, ffn_hidden=512,
               vocab=1024, seq=512, batch=2, ranks=2, ac="op")
    r = cb.run_row(row, steps=1)
    _check(r, 2 * 512)
    assert r["rank0"]["comm_s"] > 0  # FSDP2's all-gathers and reduce-scatters
    assert r["rank0"]["breakdown_s"]["attention"] > 0
